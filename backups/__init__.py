"""Backups of the book of record and its restore (issue 28 item 5): no Django,
so it runs while the database it serves is gone. One module per step:

  server    a MariaDB server this package starts on a data directory of its
            own (the restore's, the drill's), and the client of one running
  manifest  what each backup is (full, incremental, logs), written beside it,
            and the chain a restore prepares (the last full and its incrementals)
  backup    `bash scripts/backup full|incremental|logs|list` (mariadb-backup,
            the binary logs copied)
  restore   `bash scripts/restore`: prepare, copy back, replay the binary logs
            on a server nobody else reaches, then (--rebuild-redis) fence Redis
            before the server is given its port
  drill     a sale on its own server that loses its data directory mid-sale and
            is restored (the test and the fault matrix's `mariadb-restore` row)
"""
