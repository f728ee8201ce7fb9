"""The parse judge: an engine's parse of a golden's output ids against the message it expects
(judge.py says what is checked)."""
