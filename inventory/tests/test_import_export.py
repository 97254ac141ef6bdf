"""Data in and out of the admin: CSV / XLSX exports that match the tables, and
the SKU import that goes through the SKU service, all rows or none."""
from __future__ import annotations

import csv
import io

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from conftest import unique
from inventory import redis_store
from inventory.models import InventoryLog, Sku
from inventory.services import skus
from inventory.services import stock as stock_services
from inventory.tests.test_admin import staff

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
    r = redis_store.redis()
    for sku_id in sku_ids:
        assert not redis_store.snapshot_exists(sku_id=sku_id), sku_id
        assert not r.sismember(redis_store.SKU_REGISTRY, sku_id), sku_id
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
    live = redis_store.live_stock(sku_id=sku_id)
    assert live is not None and live.available == stock, live
    assert redis_store.sku_registry_check(sku_id=sku_id) in (True, None)
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
    assert redis_store.live_stock(sku_id=sku_b.sku_id).available == 0


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
    assert redis_store.live_stock(sku_id=f"{prefix}-1").available == 2
    assert InventoryLog.objects.filter(sku_id=f"{prefix}-1", operation="RESTOCK", quantity=2, actor="t").exists()
