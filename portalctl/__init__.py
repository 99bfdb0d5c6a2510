"""portalctl: the GPU Portal's command-line client over its REST API (API.md), in the spirit of arena / runai.

A client only: it speaks HTTP to a portal and imports nothing of the portal's own code or of Django.
"""

__version__ = "0.1.0"
