"""Dead letters: a message a consumer refused, or that RabbitMQ dead-lettered,
recorded in the DeadLetter table (`dead_letter_record`, `dead_letters_collect`).
Ops replay one through the normal consumer path, or discard it with a
reason. Either closes the letter for good (a conditional
change of its status under its row lock), and who, when and why stay on it.

Replaying a confirm must never sell a unit twice, and its outcome must not
depend on when ops press the button. A confirm dead letter is a reservation
the gate accepted and answered 202 for: the buyer holds a promise. Its
confirm then failed in MySQL, so MySQL never took the unit, and its unit went
back to Redis (orders.services.confirm, `_decide_splitting`), which also marks
it settled for SECKILL_DONE_MARKER_SECONDS. Deciding by that marker would make
the same letter a refusal within the hour and an order after it. So the outcome is
decided by MySQL's record and the stock, reservation by reservation:

- MySQL already decided it (its ReservationDecision: an order, a refusal, an
  undo): nothing to do, the consumer would say the same.
- Redis still holds it in flight (RabbitMQ dead-lettered the message): its unit
  is still taken; publish it again and the consumer decides.
- Otherwise, whether Redis still marks it settled or has forgotten it: its
  unit is back on sale. Honour the promise when stock allows: take its units
  through Redis again first (once, keyed by the letter and the order), as the
  gate takes, drop the settled marker so the consumer does not skip it, and
  publish; the consumer makes the order (or a FAILED refusal for the reasons
  any confirm has). Not enough units left in Redis (sold to somebody else
  meanwhile): it is decided undone (inventory.services.decisions, with a
  `fail` sale log row for the audit), which also makes any later copy of the
  confirm a no-op, and the buyer orders again. At worst Redis ends
  below MySQL for a while (a take the consumer then refuses), which
  reconciliation repairs; never above it.

The take's own marker (SECKILL_MARKER_LIFETIME_SECONDS, a day) only matters to
a replay retried after its publish failed: it keeps the retry from taking the
units twice.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from celery import current_app
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from kombu.exceptions import KombuError

from core.errors import DomainError, Unavailable
from core.redis.errors import RedisError
from inventory import selectors, signing
from inventory.domain import Reservation
from inventory.messages import celery_sends, encoding, names, publisher, queues
from inventory.models import DeadLetter, Sku
from inventory.redis import gate, keys as redis_keys
from inventory.services.decisions import reservation_undo_record

logger = logging.getLogger(__name__)


# --- Recorded: refused by a consumer, or dead-lettered by RabbitMQ ------------------------

def dead_letter_record(*, task_name: str, payload: dict, reason: str) -> DeadLetter:
    return DeadLetter.objects.create(task_name=task_name, payload=payload, reason=reason[:255])


def dead_letters_collect(*, limit: int = 500) -> int:
    """Move what RabbitMQ dead-lettered (delivery limit, rejected) into the
    DeadLetter table, where ops see it in the admin."""
    moved = 0
    # The project's Celery app: the one Celery's Django fix-up makes every thread's default.
    with current_app.connection_for_write() as conn:
        queue = queues.dead_letter_queue()(conn.default_channel)
        queue.declare()
        for _ in range(limit):
            message = queue.get(no_ack=False, accept=["json"])
            if message is None:
                break
            headers = message.headers or {}
            kind = headers.get(names.KIND_HEADER)
            try:
                body = message.decode() if kind is None else message.body.decode("utf-8", "replace")
            except Exception:
                body = {"raw": message.body.decode(errors="replace")[:10000]}
            deaths = headers.get("x-death") or [{}]
            dead_letter_record(
                task_name=str(kind or headers.get("task", "?")),
                payload={"body": body, "id": headers.get("id"), "headers": {
                    k: v for k, v in headers.items() if isinstance(v, (str, int, float))}},
                reason=f"dead-lettered by RabbitMQ: {deaths[0].get('reason', 'delivery limit')}")
            message.ack()
            moved += 1
    return moved


# --- Closed by ops: replayed or discarded ----------------------------------------------------

class DeadLetterClosed(DomainError):
    code, http_status, message = "dead_letter_closed", 409, _("This dead letter was already resolved.")


class DeadLetterNotReplayable(DomainError):
    code, http_status, message = "dead_letter_not_replayable", 422, _("This dead letter cannot be replayed.")


class DeadLetterReasonRequired(DomainError):
    code, http_status, message = "dead_letter_reason_required", 400, _("Give the reason for discarding it.")


@dataclass
class ReplayOutcome:
    published: list[str] = field(default_factory=list)     # confirms sent to the consumer
    refused: list[str] = field(default_factory=list)       # could not be honoured: refused log row
    decided_before: list[str] = field(default_factory=list)  # MySQL had decided them already
    gives: int = 0                                          # gives sent to Redis again

    def note(self) -> str:
        parts = []
        if self.published:
            parts.append(f"confirm published again for {', '.join(self.published)}")
        if self.refused:
            parts.append(f"refused (its unit was sold meanwhile): {', '.join(self.refused)}")
        if self.decided_before:
            parts.append(f"already decided: {', '.join(self.decided_before)}")
        if self.gives:
            parts.append(f"{self.gives} give(s) sent again")
        return "; ".join(parts) or "nothing to replay"


def _take_id(letter: DeadLetter, order_id: str) -> str:
    return f"dead-letter:{letter.pk}:{order_id}"


def _lock_open(dead_letter_id: int) -> DeadLetter:
    letter = DeadLetter.objects.select_for_update().filter(pk=dead_letter_id).first()
    if letter is None:
        raise DeadLetterNotReplayable(_("No such dead letter."), dead_letter_id=dead_letter_id)
    if letter.status != DeadLetter.Status.OPEN:
        raise DeadLetterClosed(
            _("Dead letter %(id)s was already %(status)s by %(who)s.") % {
                "id": letter.pk, "status": letter.get_status_display(), "who": letter.resolved_by or "?"},
            dead_letter_id=letter.pk, status=letter.status)
    return letter


def _close(letter: DeadLetter, *, status: str, actor: str, note: str) -> None:
    letter.status = status
    letter.resolved_by = actor[:150]
    letter.resolved_at = timezone.now()
    letter.resolution_note = note
    letter.save(update_fields=["status", "resolved_by", "resolved_at", "resolution_note"])


def _reservations(letter: DeadLetter) -> list[Reservation]:
    """The reservations a confirm dead letter holds: one written by the confirm
    (its fields), or a whole confirm message RabbitMQ dead-lettered (body and
    signature header, verified again here)."""
    p = letter.payload or {}
    if "order_id" in p:
        try:
            return [Reservation(str(p["order_id"]), str(p["sku_id"]), int(p["user_id"]), int(p["quantity"]),
                                str(p["idempotency_key"]), int(p["reserved_ms"]), int(p["epoch"]),
                                str(p.get("unit_price", "")))]
        except (KeyError, TypeError, ValueError) as exc:
            raise DeadLetterNotReplayable(_("The reservation in this dead letter is malformed.")) from exc
    body = p.get("body")
    if isinstance(body, str):
        try:
            return encoding.confirm_decode(body.encode("utf-8"), p.get("headers") or {})
        except encoding.BadMessage as exc:
            raise DeadLetterNotReplayable(
                _("This confirm message was refused (%(why)s): it is not replayed.") % {"why": exc}) from exc
    raise DeadLetterNotReplayable(_("This confirm dead letter carries no reservation."))


def _gives(letter: DeadLetter, *, kind: str) -> list[dict]:
    """The gives of a give task dead letter, their signature checked again: the
    task message RabbitMQ dead-lettered (`body`), or the arguments the task
    itself refused (`args`)."""
    p = letter.payload or {}
    body = p.get("body", p)
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError as exc:
            raise DeadLetterNotReplayable(_("The task body is not readable.")) from exc
    try:
        args = body[0] if isinstance(body, (list, tuple)) else body["args"]
        payload, signature = args[0], args[1]
        signing.verify(payload, signature)
        return list(payload["gives"]) if kind == names.GIVES_TASK else [payload]
    except (KeyError, IndexError, TypeError) as exc:
        raise DeadLetterNotReplayable(_("The task body is not readable.")) from exc
    except signing.BadSignature as exc:
        raise DeadLetterNotReplayable(_("The task's signature does not match: it is not replayed.")) from exc


def _refuse(r: Reservation, *, actor: str, why: str) -> bool:
    """Decide undone a reservation that cannot be honoured; False when MySQL
    decided it otherwise meanwhile."""
    return reservation_undo_record(reservation=r, reason=f"dead letter replay: {why}", actor=actor) is None


def _replay_confirm(letter: DeadLetter, *, actor: str, out: ReplayOutcome) -> None:
    reservations = _reservations(letter)
    decided = set(selectors.reservation_decisions(order_ids=[r.order_id for r in reservations]))
    known_skus = set(Sku.objects.filter(pk__in={r.sku_id for r in reservations}).values_list("pk", flat=True))
    to_publish: list[Reservation] = []
    for r in reservations:
        if r.order_id in decided:
            out.decided_before.append(r.order_id)
            continue
        if r.sku_id not in known_skus:
            raise DeadLetterNotReplayable(_("SKU %(sku)s no longer exists in MySQL.") % {"sku": r.sku_id})
        if gate.inflight_find(candidates=[(r.sku_id, r.order_id)]):
            to_publish.append(r)  # its unit is still taken in Redis
            continue
        # Settled in Redis or forgotten there: the same path, whatever the marker says.
        take = _take_id(letter, r.order_id)
        if not gate.is_applied(sku_id=r.sku_id, op_id=take):
            # Redis first, as the gate takes, and all or nothing in one script: a
            # check-then-lower would let a sale in between leave Redis above MySQL.
            after = gate.adjust_available(sku_id=r.sku_id, repair_id=take, delta=-r.quantity, whole=True)
            if after is None and not gate.is_applied(sku_id=r.sku_id, op_id=take):
                raise DeadLetterNotReplayable(
                    _("Redis has no snapshot of %(sku)s: warm it, then replay again.") % {"sku": r.sku_id})
            if after == redis_keys.Adjust.REFUSED:
                why = f"sold out in Redis ({r.quantity} needed)"
                (out.refused if _refuse(r, actor=actor, why=why) else out.decided_before).append(r.order_id)
                continue
        gate.settled_forget(sku_id=r.sku_id, order_id=r.order_id)
        to_publish.append(r)
    if to_publish:
        publisher.publish_confirms(to_publish)
        out.published += [r.order_id for r in to_publish]


def dead_letter_replay(*, dead_letter_id: int, actor: str) -> ReplayOutcome:
    """Put a dead letter back through the normal consumer path, once.

    Raises DeadLetterClosed when it was replayed or discarded before, and
    DeadLetterNotReplayable (nothing changed) when it cannot be. A publish that
    fails leaves the letter open (the Redis take, keyed by letter and order, is
    not taken twice by the next attempt)."""
    try:
        with transaction.atomic(durable=True):
            letter = _lock_open(dead_letter_id)
            out = ReplayOutcome()
            kind = names.dead_letter_kind(letter.task_name)
            if kind == names.CONFIRM_KIND:
                _replay_confirm(letter, actor=actor, out=out)
            elif kind in (names.GIVES_TASK, names.GIVE_TASK):
                gives = _gives(letter, kind=kind)
                # The same publish as the outbox relay; a give is idempotent by its op id.
                celery_sends.publish_gives(gives)
                out.gives = len(gives)
            elif kind == names.FENCE_KIND:
                raise DeadLetterNotReplayable(
                    _("A fence is sent again by the confirm consumer for as long as it stands; discard it."))
            else:
                raise DeadLetterNotReplayable(
                    _("Task %(task)s is not replayed from here (the beat sends sweeps again by itself); "
                      "discard it.") % {"task": letter.task_name})
            _close(letter, status=DeadLetter.Status.REPLAYED, actor=actor, note=out.note())
    except (RedisError, KombuError, OSError, TimeoutError) as exc:
        # Rolled back: the letter stays open, and a replay later is safe.
        logger.warning("dead letter %s not replayed: %r", dead_letter_id, exc)
        raise Unavailable(_("Redis or the broker is unavailable; the dead letter stays open, "
                            "replay it again later.")) from exc
    logger.info("dead letter %s replayed by %s: %s", dead_letter_id, actor, out.note())
    return out


def dead_letter_discard(*, dead_letter_id: int, actor: str, reason: str) -> DeadLetter:
    """Close a dead letter without replaying it; the reason is required."""
    reason = (reason or "").strip()
    if not reason:
        raise DeadLetterReasonRequired(dead_letter_id=dead_letter_id)
    with transaction.atomic(durable=True):
        letter = _lock_open(dead_letter_id)
        _close(letter, status=DeadLetter.Status.DISCARDED, actor=actor, note=reason)
    logger.info("dead letter %s discarded by %s: %s", dead_letter_id, actor, reason)
    return letter
