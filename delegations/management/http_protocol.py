"""uvicorn's h11 protocol, answering 431 to a request head that outgrew its limit.

h11 stops buffering a request's line and headers past ``h11_max_incomplete_event_size``
(HANDOFF_MAX_HEADER_BYTES) while they arrive, and uvicorn then answered every such
request "400 Invalid HTTP request received.". A head that arrived whole in one read
reaches the app, whose HeaderLimits (handoff_site/asgi.py) answered 431: which of the two a client got
depended on how the bytes happened to arrive. Now both say 431, and why.
"""

from __future__ import annotations

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeadLimitedH11(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        limit = self.config.h11_max_incomplete_event_size
        if limit is None or len(self.conn.trailing_data[0]) <= limit:   # not the buffer limit: h11's other refusals
            super().send_400_response(msg)
            return
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
        message = (f"Request headers too large: more than {limit} bytes arrived before they ended; "
                   f"at most {limit}.")
        for event in (h11.Response(status_code=431, headers=headers, reason=b"Request Header Fields Too Large"),
                      h11.Data(data=message.encode()), h11.EndOfMessage()):
            self.transport.write(self.conn.send(event))
        self.transport.close()
