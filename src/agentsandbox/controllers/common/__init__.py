"""What more than one controller uses: slow-start batches and the shared pod cache."""
