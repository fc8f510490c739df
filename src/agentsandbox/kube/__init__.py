"""A generic asyncio controller runtime. Knows nothing about sandboxes."""
