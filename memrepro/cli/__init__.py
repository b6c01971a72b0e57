"""One module per subcommand; each holds its own Hydra app."""
