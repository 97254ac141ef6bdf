"""Inventory's Redis, one module per concept: `keys` (key names, the script
loader, every script's return codes), `gate` (reserve, undo, hold, settle,
gives, freezes), `snapshots` (loads, drops, fences, the warm lock, the SKU
registry), `live` (figures of the live view) and `liveness` (consumers, sweeps,
beat). The scripts themselves are `inventory/lua/*.lua`. No ORM here."""
