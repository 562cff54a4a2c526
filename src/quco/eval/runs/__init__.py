"""The run directory's format and its one owner: typed records and config (`records`), the reader and
writer (`store`), the world file (`world_file`) and the reading of older run formats (`legacy`)."""
