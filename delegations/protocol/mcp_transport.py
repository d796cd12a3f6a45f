"""The HTTP transport of MCP calls (``mcp_client``): every response body stops at a size
limit, so a server that answers more than a run may record fails its call instead of
filling the worker's memory. Imported only when an MCP server is asked something."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from .errors import ErrorCode, ProtocolError


class CappedTransport(httpx2.AsyncBaseTransport):
    """``httpx2.AsyncHTTPTransport`` whose response bodies end at ``max_bytes`` with
    ERR_TOOL_FAILURE."""

    def __init__(self, max_bytes: int) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.max_bytes = max_bytes

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        return httpx2.Response(response.status_code, headers=response.headers,
                               stream=_CappedStream(response.stream, self.max_bytes),
                               extensions=response.extensions, request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, max_bytes: int) -> None:
        self.inner = inner
        self.max_bytes = max_bytes

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.max_bytes:
                raise ProtocolError(ErrorCode.TOOL_FAILURE,
                                    f"its answer is over the limit of {self.max_bytes} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def client(*, secret: str, timeout_s: float, max_bytes: int) -> httpx2.AsyncClient:
    """The httpx2 client an MCP call goes through: the secret as a Bearer header, the
    server's timeout, capped bodies."""
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    return httpx2.AsyncClient(headers=headers, timeout=timeout_s, transport=CappedTransport(max_bytes))
