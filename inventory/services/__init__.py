"""Every write to stock, one module per sub-domain:

- skus:      SKUs, their sale data, bulk import
- snapshots: their Redis snapshots: warm, fence and its pass, rebuild, distrust
- registry:  the registry of SKU ids MySQL has (kept in Redis)
- stock:     the confirm's bucket move, the ops moves (takes start in Redis), repairs
- gives:     gives through the outbox (gives start in MySQL)
- dead_letters: recorded (refused, or collected from RabbitMQ), replayed or discarded by ops
- orphans:   the orphan sweep's changes in Redis (deadlines moved on, fences listed again)
- decisions: the one writer of reservation decisions
- retention: old outbox rows and dead letters, retiring an ended SKU's Redis keys
- locks:     the one helper that locks SKU rows
"""
