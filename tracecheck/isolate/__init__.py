"""Isolate: every task (discover a file, run one stage of one probe) in its own process, forked from a template
that has torch and the compiler stack loaded (``runner``, ``template``, ``preload``); ``worker`` is the task side,
``protocol`` the messages between them. A probe that crashes, hangs or leaks takes only its own task down."""
