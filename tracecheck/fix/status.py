"""What ``tracecheck fix`` concluded: one of these four (FixOutcome.status)."""

VERIFIED, NOT_VERIFIED, NO_CODE_FIX, NOTHING_TO_FIX = "verified", "not verified", "no code fix", "nothing to fix"
