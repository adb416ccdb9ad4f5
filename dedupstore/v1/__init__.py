"""Version 1 of the service's wire contract: ``dedupstore.proto`` and the modules generated from it."""
