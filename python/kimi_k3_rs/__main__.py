"""``python -m kimi_k3_rs`` runs the command line (see ``kimi_k3_rs.cli``)."""

from .cli import main

raise SystemExit(main())
