"""FastAPI dependencies as Annotated aliases (``async def``: a sync dependency would run in the thread pool)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.issuing.node import Node
from app.settings import Settings


async def get_node(request: Request) -> Node:
    return request.app.state.node  # type: ignore[no-any-return]


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


NodeDep = Annotated[Node, Depends(get_node)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
