"""Migration operations for moving models between apps without moving data (issue 15).

A model moves by state only: the new app's migration creates it in Django's migration state with the old
``db_table``, every foreign key that pointed at the old model is altered (state only) to point at the new one, and
the old app's migration deletes it from the state. The tables, their rows and their constraints stay as they are.

- ``state_only(*operations)``: operations that change what Django believes, never the database.
- ``content_types_moved(...)``: the ContentType rows (and with them permissions and admin log entries) follow.
- ``CreateUnlessTableExists``: for a model whose old app is gone from INSTALLED_APPS (builds -> images): on a
  database built before the move the table is there and nothing is done; on a fresh database it is created.
"""

from django.db import migrations


def state_only(*operations):
    return migrations.SeparateDatabaseAndState(state_operations=list(operations), database_operations=[])


def content_types_moved(moves: list[tuple[str, str, str]]) -> migrations.RunPython:
    """RunPython that relabels ContentType rows: ``moves`` are (old_app, new_app, model_name_lower)."""

    def forwards(apps, schema_editor):
        content_type = apps.get_model("contenttypes", "ContentType")
        db = schema_editor.connection.alias
        for old_app, new_app, model in moves:
            if content_type.objects.using(db).filter(app_label=new_app, model=model).exists():
                continue  # already created for the new app (post_migrate of an earlier run): keep it
            content_type.objects.using(db).filter(app_label=old_app, model=model).update(app_label=new_app)

    def backwards(apps, schema_editor):
        content_type = apps.get_model("contenttypes", "ContentType")
        db = schema_editor.connection.alias
        for old_app, new_app, model in moves:
            if not content_type.objects.using(db).filter(app_label=old_app, model=model).exists():
                content_type.objects.using(db).filter(app_label=new_app, model=model).update(app_label=old_app)

    return migrations.RunPython(forwards, backwards, elidable=False)


class CreateUnlessTableExists(migrations.SeparateDatabaseAndState):
    """The state operations always; the database operations only when ``table`` does not exist yet."""

    def __init__(self, table: str, operations):
        super().__init__(state_operations=list(operations), database_operations=list(operations))
        self.table = table

    def _table_exists(self, schema_editor) -> bool:
        with schema_editor.connection.cursor() as cursor:
            return self.table in schema_editor.connection.introspection.table_names(cursor)

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if not self._table_exists(schema_editor):
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        pass  # the table belonged to the old app before the move: leave it

    def deconstruct(self):
        return self.__class__.__qualname__, [], {"table": self.table, "operations": self.state_operations}

    def describe(self):
        return f"Create {self.table} unless it exists (moved model)"
