"""Every admin action of every registered model, walked as each role: an action
names the permission it needs, a role is offered only the actions whose
permission it holds, and an action it is not offered, posted to the changelist
anyway, runs nothing and changes nothing. The registry is read, never listed
by hand, so a new action without a permission fails here."""
from __future__ import annotations

import functools

import pytest
from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.auth import get_permission_codename, get_user_model
from django.contrib.auth.models import Group
from django.test import Client, RequestFactory
from django.urls import reverse
from django.utils import timezone

from inventory import permissions
from testsupport.factories import unique

ROLES = (*permissions.ROLES, "superuser", "staff")  # staff: a staff user in no group
STANDARD = ("add", "change", "delete", "view")
# What ops is offered, across the whole admin (it may delete nothing).
OPS_ACTIONS = {
    "django_celery_beat.PeriodicTask": {"enable_tasks", "disable_tasks", "toggle_tasks", "run_tasks"},
    "inventory.DeadLetter": {"replay", "discard"},
    "orders.PaymentRefund": {"mark_refunded", "dismiss"},
}


def registry():
    return sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label)


def actions_of(model_admin) -> list:
    """(function, name, description) of every action the admin has for anyone
    (`actions = None` turns them all off, the site's too)."""
    return [] if model_admin.actions is None else model_admin._get_base_actions()


def user_of(role: str):
    user = get_user_model().objects.create_user(username=unique(role), password="pw", is_staff=True,
                                                is_superuser=role == "superuser")
    if role in permissions.ROLES:
        user.groups.add(Group.objects.get(name=role))
    return user


def request_of(user, model_admin):
    opts = model_admin.opts
    request = RequestFactory().get(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"))
    request.user = user
    return request


def holds(user, model_admin, request, permission: str) -> bool:
    """Whether the user holds `permission` on the admin's model: a standard one
    by the user's own Django permission (and not refused by the admin itself,
    as a read-only admin refuses delete to everyone); the project's own kinds
    (`resolve`) by the admin's method, which checks a Django permission."""
    granted = getattr(model_admin, f"has_{permission}_permission")(request)
    if permission not in STANDARD:
        return granted
    codename = get_permission_codename(permission, model_admin.opts)
    return granted and user.has_perm(f"{model_admin.opts.app_label}.{codename}")


def test_every_action_names_a_permission_beyond_view():
    unguarded = []
    for model, model_admin in registry():
        for func, name, _ in actions_of(model_admin):
            needed = tuple(getattr(func, "allowed_permissions", ()))
            # Django offers an action to a user holding ANY of its permissions:
            # "view" among them would offer it to the read-only role.
            if not needed or "view" in needed:
                unguarded.append(f"{model._meta.label}.{name}: {needed}")
            for permission in needed:
                assert callable(getattr(model_admin, f"has_{permission}_permission", None)), (model, name)
    assert not unguarded, f"admin actions without a permission beyond view: {unguarded}"


@pytest.mark.parametrize("role", ROLES)
def test_each_role_is_offered_only_the_actions_it_holds(live_db, role):
    user = user_of(role)
    client = Client()
    client.force_login(user)
    offered_anywhere = {}
    for model, model_admin in registry():
        request = request_of(user, model_admin)
        offered = set(model_admin.get_actions(request))
        # An action that names no permission is held by no role.
        expected = {name for func, name, _ in actions_of(model_admin)
                    if any(holds(user, model_admin, request, p) for p in getattr(func, "allowed_permissions", ()))}
        assert offered == expected, (role, model._meta.label)
        if offered:
            offered_anywhere[model._meta.label] = offered
        # The changelist a browser gets offers the same, and nothing more.
        page = client.get(request.path)
        if page.status_code == 200:
            form = page.context["action_form"]
            choices = {value for value, _ in form.fields["action"].choices if value} if form else set()
            assert choices == offered, (role, model._meta.label)
        else:
            assert not model_admin.has_view_or_change_permission(request) and page.status_code == 403
    if role in ("support", "staff"):
        assert offered_anywhere == {}  # read-only, or nothing at all
    elif role == "ops":
        assert offered_anywhere == OPS_ACTIONS
    else:
        assert {"enable_tasks", "disable_tasks", "toggle_tasks", "run_tasks"} <= offered_anywhere[
            "django_celery_beat.PeriodicTask"]


@pytest.fixture
def rows(live_db, make_sku):
    """A row of each model an action could change, so that a post names one."""
    from axes.models import AccessAttempt
    from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

    from inventory.models import DeadLetter
    from orders.models import PaymentRefund
    from reconciliation.models import Finding, ReconciliationRun

    every = IntervalSchedule.objects.create(every=3600, period=IntervalSchedule.SECONDS)
    task = PeriodicTask.objects.create(name=unique("sweep"), task="inventory.tasks.outbox_relay_task",
                                       interval=every, enabled=True)
    cron = CrontabSchedule.objects.create(minute="7")
    attempt = AccessAttempt.objects.create(
        username=unique("u"), ip_address="192.0.2.7", user_agent=unique("ua"), http_accept="*/*",
        path_info="/admin/login/", get_data="", post_data="", failures_since_start=1)
    letter = DeadLetter.objects.create(task_name="t", payload={"args": []}, reason="refused")
    refund = PaymentRefund.objects.create(payment_id=unique("pay"), order_ref=unique("o"),
                                          reason=PaymentRefund.Reason.UNKNOWN_ORDER)
    sku = make_sku(stock=3)
    run = ReconciliationRun.objects.create(trigger=ReconciliationRun.Trigger.ADMIN, finished_at=timezone.now())
    Finding.objects.create(run=run, kind=Finding.Kind.DEAD_LETTERS, sku=sku, detail="x")
    yield task
    # The test database is shared by the whole run: a second schedule of a sweep
    # (the health's beat figure reads every one), an open dead letter or refund
    # would change what later tests see.
    for model, filters in ((PeriodicTask, {"pk": task.pk}), (IntervalSchedule, {"pk": every.pk}),
                           (CrontabSchedule, {"pk": cron.pk}), (AccessAttempt, {"pk": attempt.pk}),
                           (DeadLetter, {"pk": letter.pk}), (PaymentRefund, {"pk": refund.pk}),
                           (Finding, {"run": run}), (ReconciliationRun, {"pk": run.pk})):
        model.objects.filter(**filters).delete()


def spy_on_every_action(monkeypatch) -> list[tuple[str, str]]:
    """Record each action run, wherever Django finds its function (the model
    admin's class, or the site for `delete_selected`). The copy keeps the
    function's attributes, so Django offers it exactly as before."""
    ran: list[tuple[str, str]] = []

    def recording(func, name):
        @functools.wraps(func)
        def run(model_admin, request, queryset):
            ran.append((model_admin.opts.label, name))
            return func(model_admin, request, queryset)
        return run

    for name, func in list(admin.site._actions.items()):
        monkeypatch.setitem(admin.site._actions, name, recording(func, name))
    for _, model_admin in registry():
        for action in model_admin.actions or ():
            if isinstance(action, str) and hasattr(type(model_admin), action):
                monkeypatch.setattr(type(model_admin), action, recording(getattr(type(model_admin), action), action))
    return ran


def post_action(client: Client, model_admin, name: str):
    """What the changelist's "Go" button sends, with the model's newest row selected."""
    model = model_admin.model
    pk = model._default_manager.order_by("-pk").values_list("pk", flat=True).first()
    before = list(model._default_manager.filter(pk=pk).values()) if pk is not None else []
    opts = model_admin.opts
    response = client.post(reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"), {
        "action": name, "index": "0", helpers.ACTION_CHECKBOX_NAME: [str(pk if pk is not None else 0)]})
    after = list(model._default_manager.filter(pk=pk).values()) if pk is not None else []
    return response, before, after


@pytest.mark.parametrize("role", ROLES)
def test_an_action_not_offered_runs_nothing_when_posted(live_db, rows, monkeypatch, role):
    user = user_of(role)
    client = Client()
    client.force_login(user)
    ran = spy_on_every_action(monkeypatch)
    tried = 0
    for model, model_admin in registry():
        request = request_of(user, model_admin)
        offered = set(model_admin.get_actions(request))
        for _, name, _ in actions_of(model_admin):
            if name in offered:
                continue
            response, before, after = post_action(client, model_admin, name)
            tried += 1
            assert response.status_code in (200, 302, 403), (role, model._meta.label, name)
            assert ran == [], (role, model._meta.label, name)
            assert after == before, (role, model._meta.label, name)
    assert tried > 0 or role == "superuser"


def test_support_cannot_stop_a_sweep_ops_can(live_db, rows, monkeypatch):
    from django_celery_beat.models import PeriodicTask

    task = rows
    ran = spy_on_every_action(monkeypatch)
    support, ops = Client(), Client()
    support.force_login(user_of("support"))
    ops.force_login(user_of("ops"))
    task_admin = admin.site._registry[PeriodicTask]
    assert support.get(reverse("admin:django_celery_beat_periodictask_changelist")).status_code == 200
    for name in ("disable_tasks", "toggle_tasks", "run_tasks"):
        post_action(support, task_admin, name)
        assert PeriodicTask.objects.get(pk=task.pk).enabled is True, name
    assert ran == []
    # The same post by ops disables it: the posts above were well formed.
    post_action(ops, task_admin, "disable_tasks")
    assert PeriodicTask.objects.get(pk=task.pk).enabled is False
    assert ran == [("django_celery_beat.PeriodicTask", "disable_tasks")]
