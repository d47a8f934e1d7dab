# Generated from _async_client.py by clients/python/scripts/unasync.py: edit that file, then run the script.
"""The client of an idmint fleet, written once: ``_async_client.py`` is the asyncio client, and ``_client.py``, the
blocking one, is generated from it by ``clients/python/scripts/unasync.py`` (edit the first, then run the script:
the test command fails while the two differ)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    guarded,
    issue_params,
    issue_path,
    ordered_reasons,
    parse_ids,
    split_lines,
    too_long,
)
from idmint_client._buffer import Buffer
from idmint_client._concurrency import Condition, Refills
from idmint_client._deadline import Deadline, deadline_transport, timeout_of
from idmint_client._exceptions import (
    ClientClosedError,
    NoReplicaAvailableError,
    RequestRejectedError,
    UnknownPublicIdError,
    UnknownSchemeError,
    UnknownSequenceError,
    ValidationError,
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


class Client(BaseClient[Condition, httpx.BaseTransport]):
    """A client of an idmint fleet, safe to share: between the tasks of one event loop (the asyncio client, whose
    methods are coroutines and whose ``stream`` is an async iterator) or between threads (the blocking client).

    ``replicas``: base URLs (a list, or one comma-separated string), tried round-robin with failover.
    ``timeout``: seconds, a deadline for each whole call (failover included; for :meth:`stream`, for each stretch
    without a complete ID), enforced on every connect, read and write of the default transport. ``api_key``: sent as
    ``Authorization: Bearer <key>``. ``max_age``: seconds a buffered ID may wait before ``new_id`` discards it
    (None: no limit). ``buffer=False``: ``new_id`` asks the server every time. ``min_refill`` / ``max_refill``:
    bounds (IDs) of the adaptive refill size (``max_refill`` is also capped by the server's max count).
    ``transport``: an httpx transport (tests).

    Every answer is checked against the scheme's token pattern from ``/v1/schemes`` before any of it is handed out;
    one that is not IDs fails its replica (moved on from, like a dead one). Raises ValueError for bad settings.
    Every call raises only :class:`~idmint_client.IdmintClientError`
    subclasses: :class:`~idmint_client.NoReplicaAvailableError` when every replica refused or failed,
    :class:`~idmint_client.RequestRejectedError` subclasses (never retried) when the request itself is wrong.

    Background refills run as tasks of the event loop that calls ``new_id`` (the asyncio client) or on one daemon
    thread (the blocking client). Fork-safe: in the child of ``os.fork()`` every buffer starts empty and
    connections are new. Use it as a context manager or call :meth:`close`.
    """

    def _fresh_state(self) -> None:
        super()._fresh_state()
        self._refills = Refills(self._refill)

    def _make_http(self) -> httpx.Client:
        transport = self._transport if self._transport is not None else deadline_transport()
        return httpx.Client(timeout=self.timeout, headers=self._headers(), transport=transport)

    # -- lifecycle -------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop background refills and close connections. Buffered IDs are dropped. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._heads.clear()
        self._refills.close()
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- new_id: the hot path ----------------------------------------------------------------------------------
    def new_id(self, scheme: str, /, format: str | None = None, **options: str) -> str:
        """One fresh ID of ``scheme`` (text form ``format``, default canonical; scheme ``options`` such as
        ``mode="time_sequential"``), from this process's buffer for (scheme, options, format).

        The buffer is refilled in the background before it runs dry; IDs older than ``max_age`` seconds are
        discarded unused. No two calls ever return the same ID. Raises NoReplicaAvailableError when the buffer is empty
        and no replica can issue, ValidationError / UnknownSchemeError for a bad scheme, option or format.
        """
        key = scheme if format is None and not options else buffer_key(scheme, format, options)
        head = self._heads.get(key)
        if head is not None and _monotonic() < head[0]:
            try:
                return head[1]()  # list_iterator.__next__: one C call, atomic under the GIL
            except StopIteration:
                pass
        return self._new_id_slow(key, scheme, format, options)

    def _lock_for(
        self, key: Key, scheme: str, fmt: str | None, options: Mapping[str, object]
    ) -> tuple[Condition, Buffer]:
        lock = self._locks.get(key)
        if lock is None:
            with self._meta_lock:
                if key not in self._locks:
                    self._buffers[key] = self._new_buffer(scheme, fmt, options)
                    self._locks[key] = Condition()
                lock = self._locks[key]
        return lock, self._buffers[key]

    def _new_id_slow(self, key: Key, scheme: str, fmt: str | None, options: Mapping[str, object]) -> str:
        if self._closed:
            raise ClientClosedError("client is closed")
        if not self.buffered:
            ids = self._issue(scheme, 1, fmt, options)
            return ids[0]
        lock, buf = self._lock_for(key, scheme, fmt, options)
        missed = False
        with lock:
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
                    while buf.refilling and buf.generation == generation:
                        if self._closed:
                            raise ClientClosedError("client is closed")
                        lock.wait(self.timeout)
                    if buf.generation != generation and not buf.queue and buf.last_error is not None:
                        raise buf.last_error
                    continue
                buf.refilling = True
                ids, started, latency = self._fetch(lock, buf)
                buf._note_drawn(1, _monotonic())
                buf.add(ids[1:], started, latency)
                return ids[0]

    def _fetch(self, lock: Condition, buf: Buffer) -> tuple[list[str], float, float]:
        """One refill request for ``buf`` (``buf.refilling`` set, ``lock`` held). The lock is released during the
        request and held again on return. Wakes waiters; raises the request's error (also kept for waiters)."""
        size = buf.refill_size(self._max_count)
        started = _monotonic()
        error: BaseException | None = None
        ids: list[str] = []
        lock.release()
        try:
            # The stream route: its text costs the client a third less CPU per ID than a JSON batch.
            for chunk in self._stream_chunks(buf.scheme, size, buf.format, buf.options, whole_call=True):
                ids.extend(chunk)
        except BaseException as exc:  # handed to the waiters, then re-raised
            error = exc
        finally:
            lock.acquire()
            buf.refilling = False
            buf.generation += 1
            buf.last_error = error
            lock.notify_all()
        if error is not None:
            raise error
        return ids, started, _monotonic() - started

    def _schedule(self, key: Key, buf: Buffer) -> None:
        """Start a background refill of ``buf`` (lock held; claimed now, so no second one starts meanwhile)."""
        buf.refilling = True
        self._refills.start(key, buf)

    def _refill(self, key: Key, buf: Buffer) -> None:
        lock = self._locks.get(key)
        if lock is None or self._buffers.get(key) is not buf or self._closed:  # fork or close in between
            return
        with lock:
            try:
                ids, started, latency = self._fetch(lock, buf)
            except Exception:  # kept in buf.last_error; the next empty draw asks again itself
                return
            buf.add(ids, started, latency)
            if buf.wants_refill(self._max_count) and not self._closed:
                self._schedule(key, buf)

    # -- batches, streams, decode, schemes ---------------------------------------------------------------------
    def ids(self, scheme: str, count: int, /, format: str | None = None, **options: str) -> list[str]:
        """``count`` fresh IDs of ``scheme`` (unbuffered), in issue order. Above the server's max count the
        request is split into several batch calls (the max is learned from /v1/schemes or a 422 naming the
        count range). Raises ValidationError (bad count, option or format), UnknownSchemeError,
        NoReplicaAvailableError."""
        deadline = Deadline(self.timeout)
        self._shape(scheme, format)  # the catalogue, with the server's max count, before the first request
        cap = self._max_count
        if cap is None or count <= cap:
            try:
                return self._issue(scheme, count, format, options, deadline)
            except ValidationError as exc:
                cap = self._learn_from(exc, count)
                if cap is None:
                    raise
        out: list[str] = []
        while len(out) < count:
            out.extend(self._issue(scheme, min(cap, count - len(out)), format, options, deadline))
        return out

    def _issue(
        self,
        scheme: str,
        count: int,
        fmt: str | None,
        options: Mapping[str, object],
        deadline: Deadline | None = None,
    ) -> list[str]:
        shape = self._shape(scheme, fmt)
        rising = shape.rule(options)
        return self._call(
            issue_path(scheme),
            scheme,
            issue_params(count, fmt, options),
            lambda r: parse_ids(r, count, shape, self._repeats, buffer_key(scheme, fmt, options), rising),
            f"issue {count} {scheme}",
            deadline,
            limit=batch_limit(count, shape),
        )

    def _shape(self, scheme: str, fmt: str | None) -> IdShape:
        """The shape answers for ``scheme`` in form ``fmt`` must have (the catalogue is fetched when needed)."""
        shape = self._known_shape(scheme, fmt)
        if shape is None:
            self._fetch_catalogue()
            shape = self._shape_after_fetch(scheme, fmt)
        return shape

    def stream(self, scheme: str, count: int, /, format: str | None = None, **options: str) -> Iterator[str]:
        """``count`` IDs of ``scheme`` from the stream route, one at a time, with memory that does not grow with
        ``count``. When a replica fails mid-way (refusal, connection lost, truncated transfer), the stream carries
        on from another replica for the remaining count; only complete lines are yielded (a partial last line is
        discarded), so every ID yielded was fully issued and none twice. Raises ValidationError / UnknownSchemeError at
        once; NoReplicaAvailableError (``delivered`` = IDs already yielded) when no replica can go on."""
        for chunk in self.stream_chunks(scheme, count, format=format, **options):
            yield from chunk

    def stream_chunks(
        self, scheme: str, count: int, /, format: str | None = None, **options: str
    ) -> Iterator[list[str]]:
        """Like :meth:`stream`, yielding lists of IDs as they arrive (cheaper per ID for bulk jobs)."""
        yield from self._stream_chunks(scheme, count, format, options, whole_call=False)

    def _stream_chunks(
        self, scheme: str, count: int, format: str | None, options: Mapping[str, object], whole_call: bool
    ) -> Iterator[list[str]]:
        """The stream machinery; ``whole_call``: the timeout bounds the whole call (a refill), else the time
        without progress (no complete, checked line)."""
        shape = self._shape(scheme, format)
        key = buffer_key(scheme, format, options)
        rising = shape.rule(options)
        deadline = Deadline(self.timeout)
        path = issue_path(scheme, stream=True)
        delivered = 0
        reasons: dict[str, str] = {}
        while True:
            plan, skipped = self._plan(scheme)
            reasons.update(skipped)
            progress = False
            for index, url in enumerate(plan):
                if self._closed:
                    raise ClientClosedError("client is closed")
                before = delivered
                try:
                    if deadline.left() <= 0:
                        raise Failed(f"not tried: the timeout of {self.timeout:g} s passed")
                    attempt = deadline.share(len(plan) - index)
                    with self._http.stream(
                        "GET",
                        url + path,
                        params=issue_params(count - delivered, format, options),
                        timeout=timeout_of(attempt),
                    ) as response:
                        attempt.began(deadline)
                        if response.status_code >= 300:
                            check(_read(response, MAX_ANSWER_BYTES))
                        check_stream_type(response)
                        declared_length(response, (count - delivered) * (shape.longest + 1))
                        partial = ""
                        last: str | None = None  # a new stream: a new generator, maybe below the last one's
                        for raw in response.iter_bytes():
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
                raise NoReplicaAvailableError(
                    f"stream {count} {scheme} ({delivered} delivered)", ordered_reasons(self.urls, reasons), delivered
                )

    @overload
    def decode(self, id: str, scheme: None = None) -> Candidates: ...
    @overload
    def decode(self, id: str, scheme: str) -> Decoded: ...

    def decode(self, id: str, scheme: str | None = None) -> Decoded | Candidates:
        """Decode ``id`` (any accepted text form). With ``scheme``: a :class:`Decoded`; without: the
        :class:`Candidates` of every scheme that accepts it (plausible readings first). Raises ValidationError naming
        the rule the ID breaks, UnknownSchemeError, NoReplicaAvailableError."""
        parse: Callable[[httpx.Response], Any] = (
            (lambda r: Candidates.from_json(r.json())) if scheme is None else (lambda r: Decoded.from_json(r.json()))
        )
        result: Decoded | Candidates = self._call(
            decode_path(id, scheme), ALL_SCOPES, None, guarded(parse), f"decode {id!r}"
        )
        return result

    def schemes(self) -> list[SchemeInfo]:
        """The schemes the fleet serves (``GET /v1/schemes`` of one replica), with their formats and limits."""
        return self._fetch_catalogue(advance=True)

    def _fetch_catalogue(self, advance: bool = False) -> list[SchemeInfo]:
        infos = self._call(
            "/v1/schemes",
            ALL_SCOPES,
            None,
            guarded(lambda r: [SchemeInfo.from_json(s) for s in r.json()["schemes"]]),
            "schemes",
            advance=advance,
        )
        self._learn(infos)
        return infos

    # -- sequences -----------------------------------------------------------------------------------------------
    @overload
    def next(self, name: str, count: int = 1, *, format: None = None) -> list[int]: ...
    @overload
    def next(self, name: str, count: int = 1, *, format: Literal["public"]) -> list[str]: ...

    def next(self, name: str, count: int = 1, *, format: str | None = None) -> list[int] | list[str]:
        """``count`` integers of sequence ``name`` (``GET /v1/sequences/{name}/next``; 1..the server's max count),
        rising, as Python ints: asked with ``format=string``, so nothing on the way rounds them. Never the same
        integer twice, from any server of the fleet (calls answered by different servers are not ordered among
        themselves: each issues from its own ranges); a call that fails over leaves a gap, never a repeat. Raises
        ValidationError (count, name), UnknownSequenceError (404: no such sequence), NoReplicaAvailableError (every
        server refused: its ranges ran out and its storage is down), SequenceStoresDifferError (servers of two
        fleets).

        ``format="public"``: the integers' public texts instead (docs/public-ids.md: 18 characters, in no order,
        read back with :meth:`reveal`), a ``list[str]``; ValidationError when the server has no public-ID keys. No
        text is handed out twice (checked against the recent texts of the sequence)."""
        if format is not None:
            return self._call(
                sequence_path(name, "next"),
                SCOPE_PREFIX + name,
                public_params(count, format),
                lambda r: self._public_next(r, name, count),
                f"next {count} of sequence {name}",
            )
        return self._call(
            sequence_path(name, "next"),
            SCOPE_PREFIX + name,
            sequence_params(count),
            lambda r: self._repeats.check_next(name, parse_next(r, name, count)),
            f"next {count} of sequence {name}",
        )

    def range(self, name: str, count: int) -> SequenceRange:
        """A fresh contiguous range of ``count`` integers (1..2**40) of sequence ``name``, reserved in storage for
        the caller (``POST /v1/sequences/{name}/range``), for offline jobs: a :class:`SequenceRange` of Python ints
        (``first``, ``last``, ``count``, ``as_range()``). Raises as :meth:`next`; a range past 2**63-1 is a
        ValidationError naming the rule."""
        return self._call(
            sequence_path(name, "range"),
            SCOPE_PREFIX + name,
            sequence_params(count),
            lambda r: self._checked_range(parse_range(r, name, count)),
            f"range of {count} of sequence {name}",
            method="POST",
        )

    def numbers(self, name: str, count: int = 1) -> SequenceNumbers:
        """``count`` numbers of a sequence with a template or periods (``GET /v1/sequences/{name}/next``): the
        integers as Python ints, their texts and their period (:class:`SequenceNumbers`; a sequence without a
        template has no texts, one that never resets no period). Raises as :meth:`next`; a gapless sequence's is a
        RequestRejectedError (409: use :meth:`reserve`)."""
        return self._call(
            sequence_path(name, "next"),
            SCOPE_PREFIX + name,
            sequence_params(count),
            lambda r: parse_numbers(r, name, count),
            f"next {count} of sequence {name}",
        )

    def parse(self, name: str, text: str) -> ParsedNumber:
        """Read a number sequence ``name`` rendered (``GET /v1/sequences/{name}/parse/{text}``): its period and
        integer, its check digit checked, and what became of it (:class:`ParsedNumber`). Raises ValidationError naming
        the rule the text breaks (a check digit that does not match)."""
        return self._call(
            parse_path(name, text), SCOPE_PREFIX + name, None, lambda r: parse_parsed(r, name), f"parse {text!r}"
        )

    def reserve(self, name: str, ttl_s: int | None = None) -> Reservation:
        """Reserve the next integer of gapless sequence ``name`` (``POST /v1/sequences/{name}/reserve``) for
        ``ttl_s`` seconds (the server's default, 60, when None): a :class:`Reservation` to :meth:`commit` or
        :meth:`void`. Uncommitted at its expiry, it is voided by the fleet and its integer is the next one reserved.
        Raises RequestRejectedError (409: not gapless; too many outstanding), ValidationError,
        NoReplicaAvailableError."""
        return self._call(
            sequence_path(name, "reserve"),
            SCOPE_PREFIX + name,
            None,
            lambda r: parse_reservation(r, name),
            f"reserve of sequence {name}",
            method="POST",
            json={} if ttl_s is None else {"ttl_s": ttl_s},
        )

    def commit(self, name: str, reservation: str) -> Settled:
        """Make a reservation's integer final (``POST /v1/sequences/{name}/commit``); a repeat (a retry) answers
        as the first. Raises RequestRejectedError (409, ``detail`` naming why: it expired, or was voided)."""
        return self._call(
            sequence_path(name, "commit"),
            SCOPE_PREFIX + name,
            None,
            lambda r: parse_settled(r, name),
            f"commit of {reservation} of sequence {name}",
            method="POST",
            json={"reservation": reservation},
        )

    def void(self, name: str, reservation: str, reason: str | None = None) -> Settled:
        """Give a reservation's integer back (``POST /v1/sequences/{name}/void``): it is the next one reserved;
        ``reason`` goes to the audit log. Raises RequestRejectedError (409: it was committed)."""
        return self._call(
            sequence_path(name, "void"),
            SCOPE_PREFIX + name,
            None,
            lambda r: parse_settled(r, name),
            f"void of {reservation} of sequence {name}",
            method="POST",
            json={"reservation": reservation, "reason": reason},
        )

    # -- public IDs ----------------------------------------------------------------------------------------------
    def reveal(self, text: str) -> Revealed:
        """The internal ID behind public ID ``text`` (``GET /v1/public/{text}``): a :class:`Revealed` (``id``,
        ``scheme``, ``key_id``, ``decoded``). Raises UnknownPublicIdError (404: no key in force opens it),
        ValidationError (the server has no public-ID keys), UnauthorizedError or ForbiddenError (no ``decode``
        scope), NoReplicaAvailableError."""
        return self._call(
            reveal_path(text),
            ALL_SCOPES,
            None,
            lambda r: parse_reveal(r, text),
            f"reveal {text[:40]!r}",
            missing=UnknownPublicIdError,
        )

    def reveal_many(self, texts: Sequence[str]) -> list[Revealed | Unrevealed]:
        """Every text of ``texts`` read back (``POST /v1/public``, 10,000 texts a request): one item per text, in
        order, a :class:`Revealed` or, for a text no key in force opens, an :class:`Unrevealed` (its ``error``).
        Raises ValidationError (no public-ID keys), UnauthorizedError, ForbiddenError, NoReplicaAvailableError."""
        if isinstance(texts, str):
            raise TypeError("reveal_many takes a sequence of texts, not one text: use reveal(text)")
        asked = list(texts)
        deadline = Deadline(self.timeout)
        out: list[Revealed | Unrevealed] = []
        for start in range(0, len(asked), MAX_REVEAL_TEXTS):
            part = asked[start : start + MAX_REVEAL_TEXTS]
            out.extend(
                self._call(
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

    # -- failover ----------------------------------------------------------------------------------------------
    def _plan(self, scope: str, advance: bool = True) -> tuple[list[str], dict[str, str]]:
        """The replicas to try for ``scope`` in order (and why others are out), each one's fleet read first
        (:class:`~idmint_client._fleet.FleetCheck`; each read within a replica's share of the timeout): one that
        cannot be read is failed over. Raises FleetOverlapError."""
        plan, reasons = self._replicas.plan(scope, advance)
        for url in self._fleets.unread(plan):
            try:
                share = Deadline(self.timeout).share(len(self.urls))
                response = self._http.get(url + FLEET_PATH, timeout=timeout_of(share))
                answers = {u: self._member_live(u, response) for u in self._fleets.same_fleet(url, response)}
                self._fleets.learn(url, response, functools.partial(_asked, answers))
            except (httpx.HTTPError, ValueError) as exc:
                reasons[url] = f"its fleet ({FLEET_PATH}) could not be read: {exc}"
                self._replicas.failed(url, reasons[url])
        return [url for url in plan if url in self._fleets.documents], reasons

    def _member_live(self, url: str, response: httpx.Response) -> bool | None:
        """Whether server ``url`` confirms the member token of the fleet document in ``response`` (see
        :class:`~idmint_client._fleet.FleetCheck`); None when there is none or it cannot tell. Asked before
        :meth:`FleetCheck.learn <idmint_client._fleet.FleetCheck.learn>`, which is handed the answers."""
        try:
            token = response.json().get("member") if response.status_code == 200 else None
        except (ValueError, AttributeError):
            return None
        if not isinstance(token, str) or not token:
            return None
        try:
            share = Deadline(self.timeout).share(len(self.urls))
            return member_live(self._http.get(member_path(url, token), timeout=timeout_of(share)))
        except httpx.HTTPError:
            return None

    def _call(
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
        missing: type[RequestRejectedError] | None = None,
    ) -> T:
        """GET ``path`` from the replicas in turn until one answers; ``parse`` its answer (Failed: move on). Each
        attempt's answer must begin within its share of the time left (:meth:`Deadline.share`); one longer than
        ``limit`` bytes fails its replica unread."""
        if self._closed:
            raise ClientClosedError("client is closed")
        if deadline is None:
            deadline = Deadline(self.timeout)
        if missing is None:
            missing = UnknownSequenceError if scope.startswith(SCOPE_PREFIX) else UnknownSchemeError
        plan, reasons = self._plan(scope, advance)
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
                streamed = self._http.send(request, stream=True)
                try:
                    attempt.began(deadline)
                    response = _read(streamed, limit)
                finally:
                    streamed.close()
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
        raise NoReplicaAvailableError(what, ordered_reasons(self.urls, reasons))


def _read(response: httpx.Response, limit: int) -> httpx.Response:
    """``response`` read whole, unless it is longer than ``limit`` bytes (Failed, the rest unread)."""
    declared_length(response, limit)
    content = bytearray()
    for chunk in response.iter_bytes():
        content += chunk
        if len(content) > limit:
            raise too_long(len(content), limit)
    return bounded(response, bytes(content))


def _asked(answers: dict[str, bool | None], url: str, token: str) -> bool | None:
    """The member answer ``url`` gave before (asked first, so that the async client can it)."""
    return answers.get(url)
