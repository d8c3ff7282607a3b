"""Examples: a handler for `birddog worker --handler examples.handler:handle`."""
