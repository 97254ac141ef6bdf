"""Order writes, one module per part of the order life:

- place:   the purchase path (Redis and RabbitMQ only)
- confirm: reservations become orders (the worker), one transaction per SKU batch
- life:    pay, cancel, expire
"""
