"""`python -m shoal`: the `shoal` command (how a worker starts its bundled MCP servers)."""

from shoal.cli.app import main

main()
