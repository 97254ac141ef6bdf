"""Every write to stock, one module per sub-domain:

- skus:      SKUs, their sale data, bulk import
- snapshots: their Redis snapshots: warm, fence and its pass, rebuild, distrust
- registry:  the registry of SKU ids MySQL has (kept in Redis)
- stock:     the confirm's bucket move and the ops moves (takes start in Redis)
- gives:     gives through the outbox (gives start in MySQL)
- dead_letters: recorded (refused, or collected from RabbitMQ), replayed or discarded by ops
- locks:     the one helper that locks SKU rows
"""
