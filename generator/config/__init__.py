"""models.yaml, the shapes catalogue, the matrix of cases and user request bodies."""
