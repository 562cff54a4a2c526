"""Small closed word lists the rule extractors need where spaCy's small model is unreliable.

Demonyms: the small model often folds a nationality into a neighbouring name ("Ethel Houbiers French") or
tags it as a plain adjective, yet QuCo-RAG needs it as a value ("nationality", an answer to compare) and
never as part of a name to count. Person nouns and work nouns tell a pronoun or a descriptive subject
("she", "the actress", "the film") which earlier name it can stand for.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


DEMONYMS = _words(
    """
    afghan albanian algerian american andorran angolan argentine argentinian armenian australian austrian
    azerbaijani bahamian bahraini bangladeshi barbadian belarusian belgian belizean beninese bhutanese
    bolivian bosnian botswanan brazilian british bruneian bulgarian burkinabe burmese burundian cambodian
    cameroonian canadian chadian chilean chinese colombian congolese croatian cuban cypriot czech
    danish djiboutian dominican dutch ecuadorian egyptian emirati english eritrean estonian ethiopian
    fijian filipino finnish french gabonese gambian georgian german ghanaian greek grenadian guatemalan
    guinean guyanese haitian honduran hungarian icelandic indian indonesian iranian iraqi irish israeli
    italian ivorian jamaican japanese jordanian kazakh kenyan korean kosovar kuwaiti kyrgyz laotian latvian
    lebanese liberian libyan lithuanian luxembourgish luxembourgian macedonian malagasy malawian malaysian
    maldivian malian maltese mauritanian mauritian mexican moldovan monegasque mongolian montenegrin
    moroccan mozambican namibian nepalese nepali nicaraguan nigerian nigerien norwegian omani pakistani
    palestinian panamanian paraguayan persian peruvian polish portuguese qatari romanian russian rwandan
    salvadoran samoan saudi scottish senegalese serbian singaporean slovak slovakian slovenian
    somali spanish sudanese surinamese swazi swedish swiss syrian taiwanese tajik tanzanian thai togolese
    tongan trinidadian tunisian turkish turkmen ugandan ukrainian uruguayan uzbek venezuelan vietnamese
    welsh yemeni zambian zimbabwean
    prussian bavarian soviet yugoslav ottoman byzantine flemish catalan basque galician sicilian
    venetian tuscan neapolitan bohemian moravian frankish hawaiian texan californian
    european african asian arab arabian hispanic caribbean scandinavian nordic balkan
    """
)

# Words that may precede a demonym inside it ("South Korean", "Northern Irish", "New Zealander").
DEMONYM_PREFIXES = frozenset({"south", "north", "east", "west", "northern", "southern", "eastern", "western"})

# Ranks and offices that precede a person's name without being part of the name an index would count
# ("Prussian General Carl von Clausewitz", "Emperor Nicholas II"); hereditary titles are kept, because
# "Prince Ernst of Hohenberg" is how the person is named.
RANK_TITLES = _words(
    """
    general admiral colonel captain major lieutenant sergeant commander marshal field-marshal brigadier
    president vice-president senator governor chancellor minister premier mayor emperor empress tsar czar
    pope cardinal bishop archbishop reverend rev dr doctor professor prof mr mrs ms miss sir dame lord lady
    judge justice ambassador
    """
)

# Nouns for a person: a pronoun "he/she" or "the actress" stands for a person's name.
PERSON_NOUNS = _words(
    """
    person man woman boy girl actor actress director filmmaker producer screenwriter writer author novelist
    poet playwright journalist singer songwriter rapper musician composer guitarist drummer bassist pianist
    artist painter sculptor photographer architect engineer scientist physicist chemist mathematician
    philosopher economist historian politician president king queen prince princess duke duchess emperor
    empress count countess earl baron lord lady knight saint bishop pope priest monk nun cardinal general
    admiral officer soldier commander player footballer cricketer athlete coach manager founder leader
    chairman ceo businessman businesswoman entrepreneur inventor explorer teacher professor scholar lawyer
    judge doctor physician surgeon model dancer comedian presenter host broadcaster father mother son
    daughter brother sister husband wife spouse uncle aunt nephew niece grandson granddaughter grandfather
    grandmother heir ruler monarch governor senator minister member star character child
    """
)

# Nouns for a work, an organisation or a place: "it" or "the film" stands for one of these.
THING_NOUNS = _words(
    """
    film movie documentary series show programme program episode album song single track record band group
    book novel poem play opera musical magazine newspaper journal game company firm label studio team club
    university college school city town village country state province county district region river lake
    mountain island airport station bridge building castle church mosque temple park canal road route
    battle war organization organisation party genus species plant animal breed brand product airline
    """
)

PERSON_PRONOUNS = frozenset({"he", "she", "him", "her", "his", "hers"})
THING_PRONOUNS = frozenset({"it", "its"})
PLURAL_PRONOUNS = frozenset({"they", "them", "their", "both"})


def is_demonym(word: str) -> bool:
    return word.casefold() in DEMONYMS
