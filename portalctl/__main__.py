"""`python -m portalctl ...`"""

from portalctl.cli import main

raise SystemExit(main())
