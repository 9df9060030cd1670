"""Small `ddrive` subcommands that belong to no other layer."""
