"""Billing: usage events (events.py, written by the gateway at each request's settlement), the
consumer that counts them (consumer.py, run by the billing deployment, deployment.py) and the
ledger of aggregates and invoices it counts them into (ledger.py). Layer 3: Redis and the
config only; the gateway writes events and reads the ledger."""
