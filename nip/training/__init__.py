"""The training loop: a trainer that walks its run plan, the algorithms it runs, the shared
model groups it fine-tunes, and the callbacks that watch it."""
