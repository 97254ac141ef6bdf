"""What the admin exports (CSV / XLSX) and the SKU import file.

Exports are plain columns of the tables (foreign keys as ids, so a big export
costs no join per row). Every export resource derives from `ExportResource`,
which keeps text cells from being read as formulas, and goes through
`ViewerExportMixin`, which bounds the rows. The import creates SKUs only through
`inventory.services.skus.skus_import`: the resource parses and checks the rows,
it never saves a Sku row itself.
"""
from __future__ import annotations

from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.utils.translation import gettext, gettext_lazy as _
from import_export import fields, resources, widgets
from import_export.admin import ExportMixin
from import_export.formats import base_formats
from import_export.results import RowResult

from inventory.models import InventoryLog, Sku
from inventory.services import skus

SKU_EXPORT_FIELDS = ("sku_id", "name", "price", "status", "total_stock", "available_stock", "frozen_stock",
                     "locked_stock", "sold_stock", "per_user_limit", "sale_starts_at", "sale_ends_at", "version",
                     "created_at", "updated_at")
# The import file's columns; only sku_id and stock are required.
SKU_IMPORT_FIELDS = ("sku_id", "name", "price", "per_user_limit", "sale_starts_at", "sale_ends_at", "status",
                     "stock")


# A spreadsheet may read a text cell starting with one of these as a formula
# (tab and CR: some skip leading white space first). OWASP's CSV-injection list.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# Put before such a text (OWASP's advice): what follows a leading quote is never
# a formula, the reader sees the cell was changed, and one character strips it.
TEXT_MARK = "'"


class ExportResource(resources.ModelResource):
    """The base of every export resource (`ViewerExportMixin` refuses any other).

    Every cell passes `export_field`, whatever the format, so this is the one
    place where buyer-controlled text (idempotency keys, payment ids, SKU names,
    reasons) is defused. The decision is taken on the value's type before the
    widget renders it: CSV renders numbers as text too, and a negative number
    (a drift of -3) must stay the number -3, not become text.
    """

    def export_field(self, field, instance, **kwargs):
        value = super().export_field(field, instance, **kwargs)
        if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not self._is_number(field, instance):
            return TEXT_MARK + value
        return value

    def _is_number(self, field, instance) -> bool:
        method = field.get_dehydrate_method(self.get_field_name(field))
        if callable(method) or hasattr(self, method):
            return False  # what a dehydrate method returns as text is text
        raw = field.get_value(instance)
        return isinstance(raw, (int, float, Decimal)) and not isinstance(raw, bool)


class SkuExportResource(ExportResource):
    class Meta:
        model = Sku
        name = _("SKUs with their stock buckets")
        fields = SKU_EXPORT_FIELDS
        export_order = SKU_EXPORT_FIELDS


class InventoryLogResource(ExportResource):
    # the id, not the row: no query per exported line
    sku = fields.Field(attribute="sku_id", column_name="sku")

    class Meta:
        model = InventoryLog
        name = _("Inventory log")
        fields = ("id", "created_at", "sku", "operation", "quantity", "order_id", "op_id", "status", "actor",
                  "reason", "updated_at")
        export_order = fields


class _NumberOrRowError:
    """A cell that is not a number is a row error on its field (the library's
    number widgets raise InvalidOperation, which it reports as a crash of the row)."""

    def clean(self, value, row=None, **kwargs):
        try:
            return super().clean(value, row, **kwargs)
        except (InvalidOperation, TypeError):
            raise ValueError(gettext("Enter a number.")) from None


class PriceWidget(_NumberOrRowError, widgets.DecimalWidget):
    pass


class WholeNumberWidget(_NumberOrRowError, widgets.IntegerWidget):
    pass


class SkuImportResource(resources.ModelResource):
    """New SKUs from a file, all or none.

    The dry run (the preview) checks every row with the service's own rules and
    saves nothing; the confirmed run checks again and hands every row to
    `skus.skus_import`, which creates them in one transaction (Redis is warmed
    after its commit). An existing sku_id is a row error: the import never
    changes a SKU, and stock only moves through the stock actions.
    """

    stock = fields.Field(attribute="stock", column_name="stock", widget=WholeNumberWidget())
    per_user_limit = fields.Field(attribute="per_user_limit", column_name="per_user_limit",
                                  widget=WholeNumberWidget())
    price = fields.Field(attribute="price", column_name="price", widget=PriceWidget())

    class Meta:
        model = Sku
        name = _("New SKUs (created through the SKU service)")
        fields = SKU_IMPORT_FIELDS
        import_order = SKU_IMPORT_FIELDS
        import_id_fields = ("sku_id",)
        # The service owns its transaction; the dry run saves nothing at all.
        use_transactions = False
        clean_model_instances = False
        skip_unchanged = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._specs: dict[int, skus.SkuSpec] = {}
        self._row_of_key: dict[str, int] = {}  # sku_id_key -> the accepted row that has it
        self._rows: dict[int, tuple[dict, RowResult]] = {}
        self._row_number = 0

    # --- per row -------------------------------------------------------------
    def import_row(self, row, instance_loader, **kwargs):
        self._row_number = kwargs.get("row_number", self._row_number + 1)
        row_result = super().import_row(row, instance_loader, **kwargs)
        self._rows[self._row_number] = (row, row_result)
        return row_result

    def get_or_init_instance(self, instance_loader, row):
        # Always a new instance: an existing sku_id is reported by the checks
        # below, never loaded and changed.
        return self.init_instance(row), True

    @staticmethod
    def _spec(instance: Sku) -> skus.SkuSpec:
        price = instance.price
        return skus.SkuSpec(
            sku_id="" if instance.sku_id is None else str(instance.sku_id),
            stock=getattr(instance, "stock", None),
            name=instance.name or "",
            per_user_limit=1 if instance.per_user_limit in (None, "") else instance.per_user_limit,
            price=Decimal(0) if price in (None, "") else Decimal(str(price)),
            starts_at=instance.sale_starts_at, ends_at=instance.sale_ends_at,
            status=instance.status or Sku.Status.ACTIVE,
        )

    def validate_instance(self, instance, import_validation_errors=None, validate_unique=True):
        errors = {name: list(e.messages) if isinstance(e, ValidationError) else list(e)
                  for name, e in (import_validation_errors or {}).items()}
        parse_failed = set(errors)
        spec = self._spec(instance)
        found = skus.skus_import_errors(specs={self._row_number: spec}).get(self._row_number, {})
        first = self._row_of_key.get(skus.sku_id_key(spec.sku_id))
        if first is not None:  # `abc` after `ABC` too: MySQL takes them for one id
            found.setdefault("sku_id", []).append(skus.sku_id_repeated_message(
                sku_id=spec.sku_id, other=self._specs[first].sku_id, row=first))
        for name, messages in found.items():
            if name not in parse_failed:  # "not a number" says enough
                errors.setdefault(name, []).extend(messages)
        if "price" not in errors:
            try:  # digits and decimal places of the column
                instance.price = spec.price
                instance.clean_fields(exclude=[f.name for f in Sku._meta.fields if f.name != "price"])
            except ValidationError as exc:
                errors.setdefault("price", []).extend(exc.message_dict.get("price", exc.messages))
        if not errors:
            self._specs[self._row_number] = spec
            self._row_of_key[skus.sku_id_key(spec.sku_id)] = self._row_number
        if errors:
            raise ValidationError(errors)

    def skip_row(self, instance, original, row, import_validation_errors=None):
        # A blank line (spreadsheets keep some below the data) is no SKU.
        return all(value is None or str(value).strip() == "" for value in row.values())

    def save_instance(self, instance, is_create, row, **kwargs):
        """Nothing is saved row by row: `after_import` hands all rows to the service."""

    def save_m2m(self, instance, row, **kwargs):
        pass

    # --- the whole file ------------------------------------------------------------
    def after_import(self, dataset, result, **kwargs):
        if kwargs.get("dry_run") or result.has_errors() or result.has_validation_errors():
            return
        user = kwargs.get("user")
        actor = f"admin-import:{user.get_username()}" if user is not None else "import"
        try:
            created = skus.skus_import(specs=self._specs, actor=actor)
        except skus.SkuImportRefused as refused:
            # A row became invalid since the preview (say, the same SKU was
            # created meanwhile): nothing was written, the rows are reported.
            for number, row_errors in sorted(refused.errors.items()):
                row, row_result = self._rows[number]
                error = ValidationError(row_errors)
                result.totals[row_result.import_type] -= 1
                row_result.import_type = RowResult.IMPORT_TYPE_INVALID
                row_result.validation_error = error
                result.totals[RowResult.IMPORT_TYPE_INVALID] += 1
                result.append_invalid_row(number, row, error)
            return
        by_id = {sku.sku_id: sku for sku in created}
        for number, spec in self._specs.items():
            _row, row_result = self._rows[number]
            row_result.instance = by_id[spec.sku_id]
            row_result.add_instance_info(row_result.instance)


# --- admin side --------------------------------------------------------------------

class ExportTooLarge(ValueError):
    """More rows than one export may hold. A ValueError, because that is what
    the library's export view shows as an error message above the form."""


def export_max_rows() -> int:
    # An export holds one worker thread, and its process's GIL, which the buying
    # threads share, for seconds per ten thousand rows (XLSX about twice CSV;
    # docs/operations.md, "The ops console"): the default keeps that short.
    return settings.SECKILL_EXPORT_MAX_ROWS


class ViewerExportMixin(ExportMixin):
    """Export from a changelist (its filters and search apply) in CSV or XLSX,
    for the users who may view the model, and only them (the library's default
    lets every staff user export).

    An export is built in the web worker, in memory (tablib, then openpyxl for
    XLSX), so it is bounded: beyond `SECKILL_EXPORT_MAX_ROWS` rows it is refused
    with a message asking to filter, before a row is read. The rows are read
    with `QuerySet.iterator()` (the library's `iter_queryset`), so no model
    instance cache is built beside the dataset; MySQL's client still buffers
    the raw rows of the query, one more reason for the cap. A streamed CSV
    would not help: the worker thread is as busy, only for longer.
    """

    formats = [base_formats.CSV, base_formats.XLSX]

    def has_export_permission(self, request):
        return self.has_view_permission(request)

    def get_data_for_export(self, request, queryset, **kwargs):
        resource_class = self.choose_export_resource_class(kwargs.get("export_form"), request)
        if not issubclass(resource_class, ExportResource):
            raise ImproperlyConfigured(f"{resource_class.__name__} must derive from ExportResource "
                                       "(it keeps formulas out of exports)")
        limit = export_max_rows()
        # COUNT over a LIMIT: costs at most limit + 1 index entries, whatever the table's size.
        found = queryset.order_by()[: limit + 1].count()
        if found > limit:
            raise ExportTooLarge(gettext(
                "This export would hold more than %(limit)s rows; filter or search the list to fewer rows "
                "and export again.") % {"limit": limit})
        # The slice holds if rows were added since the count.
        return super().get_data_for_export(request, queryset[:limit], **kwargs)
