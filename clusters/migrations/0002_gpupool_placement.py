from django.db import migrations, models


class Migration(migrations.Migration):
    """Per-pool placement policy (DESIGN.md "Scheduling"): binpack (the default, what every pool did before),
    spread, or fragmentation-aware."""

    dependencies = [
        ("clusters", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="gpupool",
            name="placement",
            field=models.CharField(
                choices=[
                    ("binpack", "Bin-pack (fill partly used nodes first)"),
                    ("spread", "Spread (emptiest node first)"),
                    ("fragmentation", "Fragmentation-aware (keep whole nodes free for large gangs)"),
                ],
                default="binpack",
                help_text="How the scheduler picks nodes and GPUs for this pool's jobs.",
                max_length=20,
            ),
        ),
    ]
