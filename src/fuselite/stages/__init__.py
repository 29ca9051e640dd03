"""The pass bodies, by concern: ``graph`` (import, inlining, fusion, variables, recurrent forms),
``quantization``, ``checks`` (LiteRT, TFLite Micro, Vela) and ``export``; ``groups`` holds the passes that
other stages run again. ``fuselite/pipeline.py`` declares the order; this package only does the work."""
