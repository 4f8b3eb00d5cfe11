"""One module per section of the post-incident report; each derives its part from a shared ``Source``."""
