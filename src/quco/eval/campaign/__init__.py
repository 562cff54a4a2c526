"""The results campaign: a plan of rows per dataset (`plan`), running it (`results`) and its progress (`status`)."""
