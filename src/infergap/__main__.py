"""``python -m infergap`` runs the command line."""

from infergap.cli import main

main()
