from django.apps import AppConfig


class SkillsConfig(AppConfig):
    name = "skills"
    verbose_name = "Skill registry"
    default_auto_field = "django.db.models.BigAutoField"
