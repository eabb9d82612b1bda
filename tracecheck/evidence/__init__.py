"""Evidence, captured inside a stage process: graph breaks, recompiles and Inductor's output code from the
structured trace (``tracelog``), exceptions as plain data (``exceptions``), the user's frame (``frames``), op
registrations (``opwatch``) and the ops a run called (``oprecorder``), the modules a probe reaches
(``reachable``), the parsers' own failures (``parsers``), and how torch words things (``wording``).
What is captured here is data for the classifier; nothing here names a kind."""
