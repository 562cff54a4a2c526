"""Answering questions: one question through a method (`answering`), threads or processes as the generator
declares (`executors`), a whole resumable run (`runner`), what is run (`target`), matched controls (`matched`)."""
