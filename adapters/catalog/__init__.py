"""The service catalog's readers: Backstage ``catalog-info.yaml`` files (``backstage``)."""
