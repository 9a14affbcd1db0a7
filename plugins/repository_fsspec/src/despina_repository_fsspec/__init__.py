"""Cloud model repositories (S3 and S3-compatible, Google Cloud Storage, Azure) on fsspec."""
