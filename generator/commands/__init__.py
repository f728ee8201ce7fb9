"""The bodies of the `goldens` commands, one module per group, above every stage.

cli.py declares each command's options and calls one function here by name (imported only when
that command runs); a command may join several stages, so its body lives here rather than in
any of them, and every stage stays a library that imports only the stages below it
(generator/layers.py).
"""
