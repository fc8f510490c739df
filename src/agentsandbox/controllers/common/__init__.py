"""What more than one controller uses: slow-start batches, the pod cache, ReconcileErrors."""
