"""The ground floor for infrastructure: git (GitPython), the Docker engine, the registry, image
references, crash-safe writes (atomic files, the journal). Stages, ``sources`` and the contract
import it; it imports nothing of forgepatch above the ground modules (errors, paths,
envsettings, progress). docs/architecture.md draws the layers; .importlinter checks them."""
