"""The third-party model admins, each action gated on a permission.

Django offers an admin action to every user who may see the changelist
unless the action names `allowed_permissions`; django-celery-beat's (enable,
disable, toggle, run) and django-axes' clean-up name none, so the read-only
support role, which may view the beat schedule, could stop every sweep. Each
such admin is registered again here as a subclass whose actions are copies
that carry the permission they need; the project's own admins declare theirs
with `@admin.action(permissions=...)`. core/tests/test_admin_actions.py walks
every action of every registered admin as each role.

`core` is installed after `django_celery_beat` and `axes`, so their admins are
registered when this module is imported (autodiscovery follows INSTALLED_APPS).
"""
from __future__ import annotations

from collections.abc import Callable

from axes import admin as axes_admin
from axes.models import AccessAttempt
from django.contrib import admin
from django_celery_beat import admin as beat_admin
from django_celery_beat.models import PeriodicTask


def gated(action: Callable, *permissions: str):
    """A copy of a third-party action that Django offers, and runs, only for a
    user the model admin grants one of `permissions` (`has_<name>_permission`).
    A copy, so the library's own function is left as it was."""

    def run(modeladmin, request, queryset):
        return action(modeladmin, request, queryset)

    run.__name__ = run.__qualname__ = action.__name__
    run.__doc__ = action.__doc__
    return admin.action(run, permissions=permissions, description=getattr(action, "short_description", None))


_Beat = beat_admin.PeriodicTaskAdmin


class PeriodicTaskAdmin(_Beat):
    # Switching a sweep on or off, or sending it now, changes what the beat
    # does: the permission to change periodic tasks (ops), never view only.
    enable_tasks = gated(_Beat.enable_tasks, "change")
    disable_tasks = gated(_Beat.disable_tasks, "change")
    toggle_tasks = gated(_Beat.toggle_tasks, "change")
    run_tasks = gated(_Beat.run_tasks, "change")


class AccessAttemptAdmin(axes_admin.AccessAttemptAdmin):
    # It deletes the attempts whose lockout expired.
    cleanup_expired_attempts = gated(axes_admin.AccessAttemptAdmin.cleanup_expired_attempts, "delete")


def _register_again(model, model_admin: type[admin.ModelAdmin]) -> None:
    # axes registers its admins only with AXES_ENABLE_ADMIN: nothing to replace then.
    if admin.site.is_registered(model):
        admin.site.unregister(model)
        admin.site.register(model, model_admin)


_register_again(PeriodicTask, PeriodicTaskAdmin)
_register_again(AccessAttempt, AccessAttemptAdmin)
