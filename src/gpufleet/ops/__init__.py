"""Operations around a cluster: a local cluster for demos and tests; plan, validate, doctor."""
