"""The asyncio client: :class:`AsyncClient`, the same surface as :class:`~idmint_client.Client` with coroutines."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal, Self, TypeVar, overload

import httpx

from idmint_client._base import (
    FLEET_PATH,
    MAX_ANSWER_BYTES,
    BaseClient,
    Key,
    batch_limit,
    bounded,
    buffer_key,
    check_stream_type,
    declared_length,
    decode_path,
    issue_params,
    issue_path,
    parse_ids,
    split_lines,
    too_long,
)
from idmint_client._buffer import Buffer
from idmint_client._client import _guarded, _ordered
from idmint_client._deadline import Deadline, async_deadline_transport, timeout_of
from idmint_client._exceptions import (
    BadRequest,
    ClientClosed,
    NoReplicaAvailable,
    RequestRejected,
    UnknownPublicIdError,
    UnknownScheme,
    UnknownSequence,
)
from idmint_client._fleet import member_live, member_path
from idmint_client._models import Candidates, Decoded, SchemeInfo
from idmint_client._public import (
    MAX_REVEAL_TEXTS,
    PUBLIC_PATH,
    Revealed,
    Unrevealed,
    parse_public_next,
    parse_reveal,
    public_params,
    public_sequence_key,
    reveal_many_parser,
    reveal_path,
)
from idmint_client._replicas import ALL_SCOPES, Failed, Refused, check, transport_reason
from idmint_client._sequences import (
    SCOPE_PREFIX,
    ParsedNumber,
    Reservation,
    SequenceNumbers,
    SequenceRange,
    Settled,
    check_one_fleet,
    parse_next,
    parse_numbers,
    parse_parsed,
    parse_path,
    parse_range,
    parse_reservation,
    parse_settled,
    sequence_params,
    sequence_path,
)
from idmint_client._shapes import IdShape

T = TypeVar("T")
_monotonic = time.monotonic


class AsyncClient(BaseClient[asyncio.Event, httpx.AsyncBaseTransport]):
    """An asyncio client of an idmint fleet: the settings, errors and behaviour of :class:`~idmint_client.Client`,
    with coroutine methods (``stream`` is an async iterator). Task-safe within one event loop: the buffer is only
    touched between awaits, and concurrent tasks that find a buffer empty share one refill request. Background
    refills are tasks of the loop that calls ``new_id``. Fork-safe like ``Client``. Use ``async with`` or
    ``await aclose()``."""

    def _fresh_state(self) -> None:
        super()._fresh_state()
        self._tasks: set[asyncio.Task[None]] = set()

    def _make_http(self) -> httpx.AsyncClient:
        transport = self._transport if self._transport is not None else async_deadline_transport()
        return httpx.AsyncClient(timeout=self.timeout, headers=self._headers(), transport=transport)

    async def aclose(self) -> None:
        """Cancel background refills and close connections. Buffered IDs are dropped. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._heads.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- new_id: the hot path ----------------------------------------------------------------------------------
    async def new_id(self, scheme: str, /, format: str | None = None, **options: str) -> str:
        """One fresh ID of ``scheme`` from this process's buffer for (scheme, options, format); see
        :meth:`Client.new_id <idmint_client.Client.new_id>` (same rules, units and errors)."""
        key = scheme if format is None and not options else buffer_key(scheme, format, options)
        head = self._heads.get(key)
        if head is not None and _monotonic() < head[0]:
            try:
                return head[1]()
            except StopIteration:
                pass
        return await self._new_id_slow(key, scheme, format, options)

    async def _new_id_slow(self, key: Key, scheme: str, fmt: str | None, options: Mapping[str, object]) -> str:
        if self._closed:
            raise ClientClosed("client is closed")
        if not self.buffered:
            return (await self._issue(scheme, 1, fmt, options))[0]
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = self._new_buffer(scheme, fmt, options)
        # No await between reading and changing the buffer below, so no other task sees it half-changed.
        missed = False
        while True:
            now = _monotonic()
            head = self._heads.get(key)
            if head is not None:
                if now < head[0]:
                    try:
                        return head[1]()
                    except StopIteration:
                        pass
                self._heads.pop(key, None)
                buf.retire_current(now)
            seg = buf.next_segment(now)
            if seg is not None:
                self._heads[key] = seg.head()
                if buf.wants_refill(self._max_count):
                    self._schedule(key, buf)
                continue
            if not missed:
                missed = True
                buf.note_miss()
            if buf.refilling:  # a refill is on its way: wait for it (its failure is ours)
                generation = buf.generation
                await self._locks[key].wait()
                if buf.generation != generation and not buf.queue and buf.last_error is not None:
                    raise buf.last_error
                continue
            self._begin(key, buf)
            ids, started, latency = await self._fetch(key, buf)
            buf._note_drawn(1, _monotonic())
            buf.add(ids[1:], started, latency)
            return ids[0]

    def _begin(self, key: Key, buf: Buffer) -> None:
        """Mark a refill of ``buf`` as under way; tasks finding the buffer empty wait on its event."""
        buf.refilling = True
        self._locks[key] = asyncio.Event()

    def _end(self, key: Key, buf: Buffer, error: BaseException | None) -> None:
        buf.refilling = False
        buf.generation += 1
        buf.last_error = error
        self._locks[key].set()

    async def _fetch(self, key: Key, buf: Buffer) -> tuple[list[str], float, float]:
        """One refill request for ``buf`` (begun by :meth:`_begin`). Raises its error (also kept in
        ``buf.last_error`` for the waiters)."""
        size = buf.refill_size(self._max_count)
        started = _monotonic()
        error: BaseException | None = None
        ids: list[str] = []
        try:
            async for chunk in self._stream_chunks(buf.scheme, size, buf.format, buf.options, whole_call=True):
                ids.extend(chunk)
        except BaseException as exc:  # handed to the waiters, then re-raised
            error = exc
        finally:
            self._end(key, buf, error)
        if error is not None:
            raise error
        return ids, started, _monotonic() - started

    def _schedule(self, key: Key, buf: Buffer) -> None:
        self._begin(key, buf)  # claimed now, so no other task starts a second refill before the task runs
        task = asyncio.get_running_loop().create_task(self._refill(key, buf))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _refill(self, key: Key, buf: Buffer) -> None:
        if self._buffers.get(key) is not buf or self._closed:
            self._end(key, buf, None)
            return
        try:
            ids, started, latency = await self._fetch(key, buf)
        except Exception:  # kept in buf.last_error; the next empty draw asks again itself
            return
        buf.add(ids, started, latency)
        if buf.wants_refill(self._max_count) and not self._closed:
            self._schedule(key, buf)

    # -- batches, streams, decode, schemes ---------------------------------------------------------------------
    async def ids(self, scheme: str, count: int, /, format: str | None = None, **options: str) -> list[str]:
        """``count`` fresh IDs, split above the server's max count; see :meth:`Client.ids
        <idmint_client.Client.ids>`."""
        deadline = Deadline(self.timeout)
        await self._shape(scheme, format)  # the catalogue, with the server's max count, before the first request
        cap = self._max_count
        if cap is None or count <= cap:
            try:
                return await self._issue(scheme, count, format, options, deadline)
            except BadRequest as exc:
                cap = self._learn_from(exc, count)
                if cap is None:
                    raise
        out: list[str] = []
        while len(out) < count:
            out.extend(await self._issue(scheme, min(cap, count - len(out)), format, options, deadline))
        return out

    async def _issue(
        self,
        scheme: str,
        count: int,
        fmt: str | None,
        options: Mapping[str, object],
        deadline: Deadline | None = None,
    ) -> list[str]:
        shape = await self._shape(scheme, fmt)
        rising = shape.rule(options)
        return await self._call(
            issue_path(scheme),
            scheme,
            issue_params(count, fmt, options),
            lambda r: parse_ids(r, count, shape, self._repeats, buffer_key(scheme, fmt, options), rising),
            f"issue {count} {scheme}",
            deadline,
            limit=batch_limit(count, shape),
        )

    async def _shape(self, scheme: str, fmt: str | None) -> IdShape:
        """The shape answers for ``scheme`` in form ``fmt`` must have (the catalogue is fetched when needed)."""
        shape = self._known_shape(scheme, fmt)
        if shape is None:
            await self._fetch_catalogue()
            shape = self._shape_after_fetch(scheme, fmt)
        return shape

    async def stream(self, scheme: str, count: int, /, format: str | None = None, **options: str) -> AsyncIterator[str]:
        """``count`` IDs from the stream route, carried on from another replica on failure; see
        :meth:`Client.stream <idmint_client.Client.stream>`."""
        async for chunk in self.stream_chunks(scheme, count, format=format, **options):
            for one in chunk:
                yield one

    async def stream_chunks(
        self, scheme: str, count: int, /, format: str | None = None, **options: str
    ) -> AsyncIterator[list[str]]:
        """Like :meth:`stream`, yielding lists of IDs as they arrive."""
        async for chunk in self._stream_chunks(scheme, count, format, options, whole_call=False):
            yield chunk

    async def _stream_chunks(
        self, scheme: str, count: int, format: str | None, options: Mapping[str, object], whole_call: bool
    ) -> AsyncIterator[list[str]]:
        """The stream machinery; ``whole_call``: the timeout bounds the whole call (a refill), else the time
        without progress (no complete, checked line)."""
        shape = await self._shape(scheme, format)
        key = buffer_key(scheme, format, options)
        rising = shape.rule(options)
        deadline = Deadline(self.timeout)
        path = issue_path(scheme, stream=True)
        delivered = 0
        reasons: dict[str, str] = {}
        while True:
            plan, skipped = await self._plan(scheme)
            reasons.update(skipped)
            progress = False
            for index, url in enumerate(plan):
                if self._closed:
                    raise ClientClosed("client is closed")
                before = delivered
                try:
                    if deadline.left() <= 0:
                        raise Failed(f"not tried: the timeout of {self.timeout:g} s passed")
                    attempt = deadline.share(len(plan) - index)
                    async with self._http.stream(
                        "GET",
                        url + path,
                        params=issue_params(count - delivered, format, options),
                        timeout=timeout_of(attempt),
                    ) as response:
                        attempt.began(deadline)
                        if response.status_code >= 300:
                            check(await _read(response, MAX_ANSWER_BYTES))
                        check_stream_type(response)
                        declared_length(response, (count - delivered) * (shape.longest + 1))
                        partial = ""
                        last: str | None = None  # a new stream: a new generator, maybe below the last one's
                        async for raw in response.aiter_bytes():
                            lines, partial = split_lines(partial, raw, shape, delivered - before + 1)
                            self._repeats.check(key, lines, "line", delivered - before + 1, rising, last)
                            if lines:
                                last = lines[-1]
                                if delivered + len(lines) > count:
                                    raise Failed(f"stream sent more than the {count - before} IDs asked for")
                                delivered += len(lines)
                                yield lines
                                if not whole_call:
                                    deadline.extend(self.timeout)
                            elif deadline.left() <= 0:  # a transport without deadlines (tests' own)
                                raise Failed(f"no complete ID within the timeout of {self.timeout:g} s")
                        if delivered < count or partial:
                            raise Failed(f"stream ended after {delivered - before} of {count - before} IDs")
                except Refused as exc:
                    self._replicas.refused(url, scheme, exc)
                    reasons[url] = exc.reason
                except Failed as exc:
                    self._replicas.failed(url, exc.reason)
                    reasons[url] = exc.reason
                except httpx.HTTPError as exc:
                    reason = transport_reason(exc) + f" (after {delivered - before} IDs)"
                    self._replicas.failed(url, reason)
                    reasons[url] = reason
                else:
                    self._replicas.succeeded(url, scheme)
                    return
                progress = progress or delivered > before
            if not progress:
                raise NoReplicaAvailable(
                    f"stream {count} {scheme} ({delivered} delivered)", _ordered(self.urls, reasons), delivered
                )

    @overload
    async def decode(self, id: str, scheme: None = None) -> Candidates: ...
    @overload
    async def decode(self, id: str, scheme: str) -> Decoded: ...

    async def decode(self, id: str, scheme: str | None = None) -> Decoded | Candidates:
        """Decode ``id``; see :meth:`Client.decode <idmint_client.Client.decode>`."""
        parse: Callable[[httpx.Response], Any] = (
            (lambda r: Candidates.from_json(r.json())) if scheme is None else (lambda r: Decoded.from_json(r.json()))
        )
        return await self._call(decode_path(id, scheme), ALL_SCOPES, None, _guarded(parse), f"decode {id!r}")

    async def schemes(self) -> list[SchemeInfo]:
        """The schemes the fleet serves; see :meth:`Client.schemes <idmint_client.Client.schemes>`."""
        return await self._fetch_catalogue(advance=True)

    async def _fetch_catalogue(self, advance: bool = False) -> list[SchemeInfo]:
        infos = await self._call(
            "/v1/schemes",
            ALL_SCOPES,
            None,
            _guarded(lambda r: [SchemeInfo.from_json(s) for s in r.json()["schemes"]]),
            "schemes",
            advance=advance,
        )
        self._learn(infos)
        return infos

    # -- sequences -----------------------------------------------------------------------------------------------
    @overload
    async def next(self, name: str, count: int = 1, *, format: None = None) -> list[int]: ...
    @overload
    async def next(self, name: str, count: int = 1, *, format: Literal["public"]) -> list[str]: ...

    async def next(self, name: str, count: int = 1, *, format: str | None = None) -> list[int] | list[str]:
        """``count`` integers of sequence ``name``, rising, as Python ints (``format="public"``: their public
        texts); see :meth:`Client.next <idmint_client.Client.next>`."""
        if format is not None:
            return await self._call(
                sequence_path(name, "next"),
                SCOPE_PREFIX + name,
                public_params(count, format),
                lambda r: self._public_next(r, name, count),
                f"next {count} of sequence {name}",
            )
        return await self._call(
            sequence_path(name, "next"),
            SCOPE_PREFIX + name,
            sequence_params(count),
            lambda r: self._repeats.check_next(name, parse_next(r, name, count)),
            f"next {count} of sequence {name}",
        )

    async def range(self, name: str, count: int) -> SequenceRange:
        """A fresh range of ``count`` integers of sequence ``name``; see
        :meth:`Client.range <idmint_client.Client.range>`."""
        return await self._call(
            sequence_path(name, "range"),
            SCOPE_PREFIX + name,
            sequence_params(count),
            lambda r: self._checked_range(parse_range(r, name, count)),
            f"range of {count} of sequence {name}",
            method="POST",
        )

    async def numbers(self, name: str, count: int = 1) -> SequenceNumbers:
        """Integers, texts and period of a business sequence; see
        :meth:`Client.numbers <idmint_client.Client.numbers>`."""
        return await self._call(
            sequence_path(name, "next"),
            SCOPE_PREFIX + name,
            sequence_params(count),
            lambda r: parse_numbers(r, name, count),
            f"next {count} of sequence {name}",
        )

    async def parse(self, name: str, text: str) -> ParsedNumber:
        """A number read back; see :meth:`Client.parse <idmint_client.Client.parse>`."""
        return await self._call(
            parse_path(name, text), SCOPE_PREFIX + name, None, lambda r: parse_parsed(r, name), f"parse {text!r}"
        )

    async def reserve(self, name: str, ttl_s: int | None = None) -> Reservation:
        """A gapless reservation; see :meth:`Client.reserve <idmint_client.Client.reserve>`."""
        return await self._call(
            sequence_path(name, "reserve"),
            SCOPE_PREFIX + name,
            None,
            lambda r: parse_reservation(r, name),
            f"reserve of sequence {name}",
            method="POST",
            json={} if ttl_s is None else {"ttl_s": ttl_s},
        )

    async def commit(self, name: str, reservation: str) -> Settled:
        """Commit a reservation; see :meth:`Client.commit <idmint_client.Client.commit>`."""
        return await self._call(
            sequence_path(name, "commit"),
            SCOPE_PREFIX + name,
            None,
            lambda r: parse_settled(r, name),
            f"commit of {reservation} of sequence {name}",
            method="POST",
            json={"reservation": reservation},
        )

    async def void(self, name: str, reservation: str, reason: str | None = None) -> Settled:
        """Void a reservation; see :meth:`Client.void <idmint_client.Client.void>`."""
        return await self._call(
            sequence_path(name, "void"),
            SCOPE_PREFIX + name,
            None,
            lambda r: parse_settled(r, name),
            f"void of {reservation} of sequence {name}",
            method="POST",
            json={"reservation": reservation, "reason": reason},
        )

    # -- public IDs ----------------------------------------------------------------------------------------------
    async def reveal(self, text: str) -> Revealed:
        """The internal ID behind public ID ``text``; see :meth:`Client.reveal <idmint_client.Client.reveal>`."""
        return await self._call(
            reveal_path(text),
            ALL_SCOPES,
            None,
            lambda r: parse_reveal(r, text),
            f"reveal {text[:40]!r}",
            missing=UnknownPublicIdError,
        )

    async def reveal_many(self, texts: Sequence[str]) -> list[Revealed | Unrevealed]:
        """Every text of ``texts`` read back, in order; see
        :meth:`Client.reveal_many <idmint_client.Client.reveal_many>`."""
        if isinstance(texts, str):
            raise TypeError("reveal_many takes a sequence of texts, not one text: use reveal(text)")
        asked = list(texts)
        deadline = Deadline(self.timeout)
        out: list[Revealed | Unrevealed] = []
        for start in range(0, len(asked), MAX_REVEAL_TEXTS):
            part = asked[start : start + MAX_REVEAL_TEXTS]
            out.extend(
                await self._call(
                    PUBLIC_PATH,
                    ALL_SCOPES,
                    None,
                    reveal_many_parser(part),
                    f"reveal {len(part)} public IDs",
                    deadline,
                    method="POST",
                    json={"texts": part},
                )
            )
        return out

    def _public_next(self, response: httpx.Response, name: str, count: int) -> list[str]:
        texts = parse_public_next(response, name, count)
        self._repeats.check(public_sequence_key(name), texts, "public ID")
        return texts

    async def _plan(self, scope: str, advance: bool = True) -> tuple[list[str], dict[str, str]]:
        """As :meth:`Client._plan <idmint_client.Client._plan>`: each replica's fleet is read before it is used."""
        plan, reasons = self._replicas.plan(scope, advance)
        for url in self._fleets.unread(plan):
            try:
                share = Deadline(self.timeout).share(len(self.urls))
                response = await self._http.get(url + FLEET_PATH, timeout=timeout_of(share))
                answers = {u: await self._member_live(u, response) for u in self._fleets.same_fleet(url, response)}
                self._fleets.learn(url, response, functools.partial(_asked, answers))
            except (httpx.HTTPError, ValueError) as exc:
                reasons[url] = f"its fleet ({FLEET_PATH}) could not be read: {exc}"
                self._replicas.failed(url, reasons[url])
        return [url for url in plan if url in self._fleets.documents], reasons

    async def _member_live(self, url: str, response: httpx.Response) -> bool | None:
        """Whether server ``url`` confirms the member token of the fleet document in ``response`` (see
        :class:`~idmint_client._fleet.FleetCheck`); None when there is none or it cannot tell."""
        try:
            token = response.json().get("member") if response.status_code == 200 else None
        except (ValueError, AttributeError):
            return None
        if not isinstance(token, str) or not token:
            return None
        try:
            share = Deadline(self.timeout).share(len(self.urls))
            return member_live(await self._http.get(member_path(url, token), timeout=timeout_of(share)))
        except httpx.HTTPError:
            return None

    async def _call(
        self,
        path: str,
        scope: str,
        params: dict[str, str] | None,
        parse: Callable[[httpx.Response], T],
        what: str,
        deadline: Deadline | None = None,
        advance: bool = True,
        method: str = "GET",
        json: dict[str, Any] | None = None,
        limit: int = MAX_ANSWER_BYTES,
        missing: type[RequestRejected] | None = None,
    ) -> T:
        if self._closed:
            raise ClientClosed("client is closed")
        if deadline is None:
            deadline = Deadline(self.timeout)
        if missing is None:
            missing = UnknownSequence if scope.startswith(SCOPE_PREFIX) else UnknownScheme
        plan, reasons = await self._plan(scope, advance)
        if scope.startswith(SCOPE_PREFIX):
            check_one_fleet(self.urls, self._fleets.documents)
        for index, url in enumerate(plan):
            if deadline.left() <= 0:
                reasons[url] = f"not tried: the timeout of {self.timeout:g} s passed"
                continue
            try:
                attempt = deadline.share(len(plan) - index)
                request = self._http.build_request(
                    method, url + path, params=params, json=json, timeout=timeout_of(attempt)
                )
                streamed = await self._http.send(request, stream=True)
                try:
                    attempt.began(deadline)
                    response = await _read(streamed, limit)
                finally:
                    await streamed.aclose()
                check(response, missing)
                result = parse(response)
            except Refused as exc:
                self._replicas.refused(url, scope, exc)
                reasons[url] = exc.reason
            except Failed as exc:
                self._replicas.failed(url, exc.reason)
                reasons[url] = exc.reason
            except httpx.HTTPError as exc:
                reasons[url] = transport_reason(exc)
                self._replicas.failed(url, reasons[url])
            else:
                self._replicas.succeeded(url, scope)
                return result
        raise NoReplicaAvailable(what, _ordered(self.urls, reasons))


async def _read(response: httpx.Response, limit: int) -> httpx.Response:
    """``response`` read whole, unless it is longer than ``limit`` bytes (Failed, the rest unread)."""
    declared_length(response, limit)
    content = bytearray()
    async for chunk in response.aiter_bytes():
        content += chunk
        if len(content) > limit:
            raise too_long(len(content), limit)
    return bounded(response, bytes(content))


def _asked(answers: dict[str, bool | None], url: str, token: str) -> bool | None:
    """The member answer ``url`` gave before (the async client asks first, then hands FleetCheck the answers)."""
    return answers.get(url)
