"""The names messages carry from one process to another: the kinds and headers
of the confirm stream's messages, the Celery names of the give tasks, and the
kind a stored dead letter stands for. Senders, consumers and the dead-letter
replay import them from here; none retypes them."""
from __future__ import annotations

CONFIRM_KIND = "confirm"
FENCE_KIND = "fence"
SIGNATURE_HEADER = "x-seckill-sig"
KIND_HEADER = "x-seckill-kind"

# The Celery names of the give tasks (inventory.tasks). GIVES_TASK is the one
# sent (inventory.messages.celery_sends); GIVE_TASK, one give per message, is
# sent by nothing now: its consumer takes what an older release left queued.
GIVE_TASK = "inventory.tasks.stock_give_task"
GIVES_TASK = "inventory.tasks.stock_gives_task"

# A dead letter's kind (DeadLetter.task_name): CONFIRM_KIND or FENCE_KIND for a
# message of the confirm queue, otherwise the Celery name of the task message.
# The give tasks' own refusals may also be stored under short spellings: a
# worker of an older release still writes them during an upgrade (migration
# inventory 0011 renamed the stored ones), and such a row reads as its task.
LEGACY_KINDS = {"stock_give": GIVE_TASK, "stock_gives": GIVES_TASK}


def dead_letter_kind(task_name: str) -> str:
    """The kind a dead letter's stored `task_name` stands for."""
    return LEGACY_KINDS.get(task_name, task_name)
