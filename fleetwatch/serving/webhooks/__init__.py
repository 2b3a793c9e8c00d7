"""Alert webhooks: subscriptions, fan-out of alert events into a delivery outbox, signed
delivery (Standard Webhooks) with retries, a dead-letter list and a delivery log."""
