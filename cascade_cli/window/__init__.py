"""The one window engine: ask, a chat turn and a served request lay out their window here."""
