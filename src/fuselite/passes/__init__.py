"""IR -> IR passes. Each pass is a plain function taking a Module (and a Report)."""
