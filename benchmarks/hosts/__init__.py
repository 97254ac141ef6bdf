"""The multi-host test bed (issue 29): network namespaces sk-<role><n> on the
bridge skbr0 (10.77.0.0/24), the stores on them (bed), the cuts between them
(net, cuts), and the app's processes on the web and worker hosts (app).
`bash scripts/cluster up --hosts | down --hosts | status --hosts`. Standard
library only, except app (the fault matrix and the tests)."""
