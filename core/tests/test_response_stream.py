"""ResponseStream: responses reach the loop from any thread; readers wait or are called back."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from despina.inference.request import InferenceResponse, ResponseStream


def response(text: str) -> InferenceResponse:
    return InferenceResponse("m", "1", text)


def test_last_waits_for_the_final_response_sent_from_a_thread() -> None:
    async def scenario() -> InferenceResponse | None:
        stream = ResponseStream()

        def backend() -> None:
            stream.send(response("a"), final=False)
            stream.send(response("b"), final=True)
            stream.send(response("ignored"), final=True)

        threading.Thread(target=backend).start()
        return await stream.last()

    last = asyncio.run(scenario())
    assert last is not None and last.id == "b" and last.final


def test_on_end_calls_back_once_on_the_loop_from_any_thread() -> None:
    async def scenario() -> list[tuple[str | None, bool]]:
        loop_thread = threading.get_ident()
        seen: list[tuple[str | None, bool]] = []
        ended = asyncio.Event()
        stream = ResponseStream()

        def on_end() -> None:
            last = stream.last_now()
            seen.append((last.id if last else None, threading.get_ident() == loop_thread))
            ended.set()

        stream.on_end(on_end)
        thread = threading.Thread(target=stream.send, args=(response("x"), True))
        thread.start()
        await ended.wait()
        thread.join()
        stream.send(None, final=True)  # after the end: ignored, no second call
        await asyncio.sleep(0)
        return seen

    assert asyncio.run(scenario()) == [("x", True)]


def test_a_failing_end_callback_goes_to_the_loop_not_the_sender() -> None:
    async def scenario() -> list[dict[str, Any]]:
        reported: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: reported.append(context)
        )
        stream = ResponseStream()

        def broken() -> None:
            raise KeyError("callback")

        stream.on_end(broken)
        stream.send(response("y"), final=True)  # on the loop: the callback runs here
        assert stream.ended and stream.last_now() is not None
        return reported

    reported = asyncio.run(scenario())
    assert len(reported) == 1 and isinstance(reported[0]["exception"], KeyError)
