"""One module per subcommand group."""

# Exit status after Ctrl-C or SIGTERM (128 + SIGINT, like a shell).
INTERRUPTED_EXIT = 130
