"""The reconcilers, one package each: sandbox, template, warmpool, claim and autoscaler."""
