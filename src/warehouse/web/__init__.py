"""Web pages (DESIGN §7): browse collections, follow and submit jobs, see the cluster.

Server-rendered with Jinja2 (autoescape on); a little JavaScript keeps job
progress live, and every page works without it. See docs/web.md.
"""

from warehouse.web.app import create_web_app, web_router
from warehouse.web.site import Site

__all__ = ["Site", "create_web_app", "web_router"]
