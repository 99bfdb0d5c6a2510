from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="Heartbeat",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=40)),
                ("host", models.CharField(max_length=255)),
                ("pid", models.IntegerField(default=0)),
                ("beat_at", models.DateTimeField()),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("name", "host"), name="core_heartbeat_name_host")],
            },
        ),
    ]
