"""The web console's files, open to anyone (the page asks for a key itself): GET /console (the
page) and /console/<file> (its script, style, icon), from zerolayer.gateway.console."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from zerolayer.gateway.bodies import BodyRoute
from zerolayer.gateway.console import console_file

__all__ = ["router"]

router = APIRouter(include_in_schema=False, route_class=BodyRoute)


@router.get("/console")
async def page() -> Response:
    """The console's page."""
    return console_file("index.html")


@router.get("/console/")
async def slash() -> Response:
    """/console/ is /console."""
    return RedirectResponse("/console", status_code=308)


@router.get("/console/{name}")
async def asset(name: str) -> Response:
    """A file of the console (script, style, icon); 404 for any other name."""
    return console_file(name)
