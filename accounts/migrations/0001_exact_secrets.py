"""Secrets compare as bytes in MySQL.

The tables' default collation (utf8mb4_unicode_ci) folds case, so a case
variant of a token (or of a session cookie) found the real row: the same user,
but a Redis record, claims and a purchase budget of its own. The columns belong
to other apps (rest_framework.authtoken, django.contrib.sessions), whose models
cannot say so, hence SQL. MODIFY keeps each column's primary key; the reverse
returns it to the table's default collation.
"""
from django.db import migrations

COLUMNS = [("authtoken_token", "`key`"), ("django_session", "`session_key`")]


class Migration(migrations.Migration):
    dependencies = [
        ("authtoken", "0004_alter_tokenproxy_options"),
        ("sessions", "0001_initial"),
    ]

    operations = [
        migrations.RunSQL(
            sql=f"ALTER TABLE {table} MODIFY {column} varchar(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL",
            reverse_sql=f"ALTER TABLE {table} MODIFY {column} varchar(40) NOT NULL",
        )
        for table, column in COLUMNS
    ]
